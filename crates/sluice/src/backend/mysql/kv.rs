//! The MySQL/MariaDB side of the key-value path: Sluice's own login (binary character
//! set, no strict SQL mode, so values convert the way the HandlerSocket plugin stores
//! them), multi-statement rounds read as text result sets, the table catalog from SHOW
//! FULL COLUMNS and SHOW INDEX, and the MySQL dialect of the statements.

use super::{Opener, ServerConn, login, read_packet};
use crate::backend::LoginError;
use crate::error::{Error, Kind, Result, Side};
use crate::kv::sql::{Dialect, quote_doubled};
use crate::kv::table::{ColKind, Column, DefaultKind, Index, Table, fit_text};
use crate::kv::{
    KvBackend, KvConn, Outcome, Piece, RowBudget, TOO_LARGE, canonical_int, joined, push_int,
};
use crate::stream::write_all_flush;
use bytes::BytesMut;
use sluice_wire_mysql::codec::Reader;
use sluice_wire_mysql::{consts, packet, resp};

/// The binary character set: no conversion of values either way.
const BINARY: u8 = 63;
/// What Sluice asks of the server for key-value connections.
pub const KV_CAPS: u64 = consts::CLIENT_LONG_PASSWORD
    | consts::CLIENT_PROTOCOL_41
    | consts::CLIENT_TRANSACTIONS
    | consts::CLIENT_SECURE_CONNECTION
    | consts::CLIENT_MULTI_STATEMENTS
    | consts::CLIENT_MULTI_RESULTS
    | consts::CLIENT_PLUGIN_AUTH;

pub struct MyKv {
    pub creds: crate::backend::Credentials,
    pub database: String,
    /// Where each new connection goes (the router's pick at that moment).
    pub targets: crate::backend::Targets,
}

impl KvBackend for MyKv {
    type Conn = ServerConn;

    async fn connect(&self) -> Result<ServerConn> {
        let opener = Opener {
            target: (self.targets)().await?,
            creds: self.creds.clone(),
            database: self.database.clone(),
            caps: KV_CAPS,
            charset: BINARY,
        };
        let mut c = match login(&opener).await {
            Ok((c, _)) => c,
            Err(LoginError::Proxy(e)) => return Err(e),
            Err(LoginError::Server(p)) => {
                let msg = resp::err_message(&p).unwrap_or_default();
                return Err(Error::server_gone(format!("login refused: {msg}")));
            }
        };
        let set = c
            .query(b"SET SESSION sql_mode = '', autocommit = 1")
            .await?;
        if let Some(Outcome::Failed { message, .. }) = set.first() {
            return Err(Error::server_gone(format!(
                "session set-up failed: {message}"
            )));
        }
        Ok(c)
    }

    async fn describe(&self, c: &mut ServerConn, db: &str, table: &str) -> Result<Option<Table>> {
        let d = MyDialect;
        let mut name = Vec::new();
        d.ident(&mut name, db);
        name.push(b'.');
        d.ident(&mut name, table);
        let mut q = b"SHOW FULL COLUMNS FROM ".to_vec();
        q.extend_from_slice(&name);
        q.extend_from_slice(b"; SHOW INDEX FROM ");
        q.extend_from_slice(&name);
        let out = c.query(&q).await?;
        let (Some(Outcome::Rows(cols)), Some(Outcome::Rows(keys))) = (out.first(), out.get(1))
        else {
            return Ok(None);
        };
        let text = |v: &Option<Vec<u8>>| {
            String::from_utf8_lossy(v.as_deref().unwrap_or_default()).into_owned()
        };
        let columns: Vec<Column> = cols
            .iter()
            .filter(|r| r.len() >= 7)
            .map(|r| {
                let ty = text(&r[1]).to_ascii_lowercase();
                let charset = r[2].as_deref().map(|c| {
                    let c = String::from_utf8_lossy(c);
                    c.split('_').next().unwrap_or_default().to_string()
                });
                Column {
                    name: text(&r[0]),
                    type_name: ty.clone(),
                    kind: kind_of(&ty),
                    charset,
                    nullable: r[3].as_deref() == Some(b"YES"),
                    generated: text(&r[6]).to_ascii_lowercase().contains("auto_increment"),
                    default: match &r[5] {
                        None => DefaultKind::Null,
                        Some(d) if d.ends_with(b"()") => DefaultKind::Expression,
                        Some(_) => DefaultKind::Literal,
                    },
                    max_chars: max_chars(&ty),
                }
            })
            .collect();
        if columns.is_empty() {
            return Ok(None);
        }
        let mut indexes: Vec<Index> = Vec::new();
        for r in keys.iter().filter(|r| r.len() >= 5) {
            let key = text(&r[2]);
            let Some(col) = columns.iter().position(|c| c.name == text(&r[4])) else {
                continue;
            };
            match indexes.last_mut() {
                Some(ix) if ix.name == key => ix.columns.push(col),
                _ => indexes.push(Index {
                    name: key,
                    columns: vec![col],
                    unique: r[1].as_deref() == Some(b"0"),
                }),
            }
        }
        Ok(Some(Table::new(db, table, columns, indexes)))
    }

    fn dialect(&self) -> &dyn Dialect {
        &MyDialect
    }
}

/// A column's kind from its SHOW COLUMNS type (`int(10) unsigned`, `varchar(20)`, ...).
fn kind_of(ty: &str) -> ColKind {
    let base = ty.split(['(', ' ']).next().unwrap_or_default();
    let unsigned = ty.contains("unsigned");
    let bits = match base {
        "tinyint" => 8,
        "smallint" => 16,
        "mediumint" => 24,
        "int" | "integer" => 32,
        "bigint" => 64,
        "tinytext" | "text" | "mediumtext" | "longtext" | "tinyblob" | "blob" | "mediumblob"
        | "longblob" => return ColKind::Blob,
        "char" | "varchar" | "binary" | "varbinary" | "enum" | "set" => return ColKind::Text,
        _ => return ColKind::Other,
    };
    if unsigned {
        ColKind::Int {
            min: 0,
            max: (1i128 << bits) - 1,
        }
    } else {
        ColKind::Int {
            min: -(1i128 << (bits - 1)),
            max: (1i128 << (bits - 1)) - 1,
        }
    }
}

/// The length of a `char(n)` / `varchar(n)` / `binary(n)` / `varbinary(n)` column.
fn max_chars(ty: &str) -> Option<usize> {
    let (base, rest) = ty.split_once('(')?;
    if !matches!(base, "char" | "varchar" | "binary" | "varbinary") {
        return None;
    }
    rest.split(')').next()?.parse().ok()
}

fn quoted(out: &mut Vec<u8>, v: &[u8]) {
    out.push(b'\'');
    for &b in v {
        match b {
            b'\'' => out.extend_from_slice(b"\\'"),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0 => out.extend_from_slice(b"\\0"),
            _ => out.push(b),
        }
    }
    out.push(b'\'');
}

/// MySQL's SQL: backquoted names, `LIMIT offset, count`.
pub struct MyDialect;

impl Dialect for MyDialect {
    fn ident(&self, out: &mut Vec<u8>, name: &str) {
        quote_doubled(out, b'`', name.as_bytes());
    }

    fn literal(&self, out: &mut Vec<u8>, col: &Column, v: Option<&[u8]>) {
        let Some(v) = v else {
            out.extend_from_slice(b"NULL");
            return;
        };
        match col.kind {
            ColKind::Int { .. } => match canonical_int(col.kind, v) {
                Some(n) => push_int(out, n),
                // As a number column stores a string: its leading number, rounded.
                None => {
                    out.extend_from_slice(b"CAST(");
                    quoted(out, v);
                    out.extend_from_slice(b" AS DECIMAL(65,0))");
                }
            },
            ColKind::Text | ColKind::Blob => {
                if let Some(cs) = &col.charset {
                    out.push(b'_');
                    out.extend_from_slice(cs.as_bytes());
                }
                quoted(out, &fit_text(col, v));
            }
            ColKind::Other => quoted(out, v),
        }
    }

    fn loses_transaction(&self, code: u32) -> bool {
        // A deadlock rolls back the whole transaction.
        code == 1213
    }

    fn zero(&self, out: &mut Vec<u8>, _col: &Column) {
        // Without strict mode the server turns '' into 0, 0.00 or the zero date.
        out.extend_from_slice(b"''");
    }

    fn order(&self, out: &mut Vec<u8>, descending: bool) {
        out.extend_from_slice(if descending { b" DESC" } else { b" ASC" });
    }

    fn limit(&self, out: &mut Vec<u8>, offset: u64, count: u64) {
        out.extend_from_slice(format!(" LIMIT {offset}, {count}").as_bytes());
    }

    fn as_signed(&self, out: &mut Vec<u8>, col: &Column) {
        out.extend_from_slice(b"CAST(");
        self.ident(out, &col.name);
        out.extend_from_slice(b" AS SIGNED)");
    }
}

/// An engine error number the reference would answer for a server error.
fn engine_error(code: u16) -> String {
    match code {
        1062 | 1586 => "121".into(),
        1205 => "146".into(),
        1213 => "149".into(),
        other => other.to_string(),
    }
}

impl KvConn for ServerConn {
    async fn run(&mut self, stmts: &[Piece<'_>]) -> Result<Vec<Outcome>> {
        self.query(&joined(stmts)).await
    }
}

impl ServerConn {
    /// How many connections the server lets ordinary users open (its
    /// `max_connections`; one more is kept for SUPER), for the server's budget.
    pub async fn server_limit(&mut self) -> Option<usize> {
        let outcomes = self.query(b"SELECT @@max_connections").await.ok()?;
        let Some(Outcome::Rows(rows)) = outcomes.into_iter().next() else {
            return None;
        };
        let v = rows.first()?.first()?.as_ref()?;
        std::str::from_utf8(v).ok()?.parse().ok()
    }

    /// The rows of a one-statement query (a health check's): empty if it failed.
    pub async fn status_rows(&mut self, sql: &[u8]) -> Result<Vec<crate::kv::Row>> {
        Ok(self.named_rows(sql).await?.1)
    }

    /// The column names and rows of a one-statement query: empty if it failed.
    pub async fn named_rows(&mut self, sql: &[u8]) -> Result<(Vec<String>, Vec<crate::kv::Row>)> {
        let mut names = Vec::new();
        let outcomes = self.query_named(sql, Some(&mut names)).await?;
        match outcomes.into_iter().next() {
            Some(Outcome::Rows(rows)) => Ok((names, rows)),
            _ => Ok((names, Vec::new())),
        }
    }

    /// Runs statements separated by `;` as one COM_QUERY: one outcome per statement run.
    pub(super) async fn query(&mut self, sql: &[u8]) -> Result<Vec<Outcome>> {
        self.query_named(sql, None).await
    }

    /// [`Self::query`], keeping the column names of the first result set in `names`.
    async fn query_named(
        &mut self,
        sql: &[u8],
        mut names: Option<&mut Vec<String>>,
    ) -> Result<Vec<Outcome>> {
        let mut payload = Vec::with_capacity(sql.len() + 1);
        payload.push(consts::COM_QUERY);
        payload.extend_from_slice(sql);
        let mut out = BytesMut::new();
        let mut seq = 0u8;
        packet::write_packet(&mut out, &mut seq, &payload);
        write_all_flush(&mut self.stream, &out).await?;
        let mut outcomes = Vec::new();
        let mut budget = RowBudget::new(self.max_message);
        loop {
            let p = self.next().await?;
            let (outcome, status) = if resp::is_err(&p) {
                let code = resp::ErrPacket::parse(&p).map_or(0, |e| e.code);
                (
                    Outcome::Failed {
                        code: code.into(),
                        message: engine_error(code),
                    },
                    0,
                )
            } else if let Some(ok) = (p.first() == Some(&resp::OK))
                .then(|| resp::OkPacket::parse(&p, self.caps))
                .flatten()
            {
                let o = Outcome::Done {
                    affected: ok.affected_rows,
                    insert_id: ok.last_insert_id,
                };
                (o, ok.status)
            } else {
                self.result_set(&p, &mut budget, names.take()).await?
            };
            self.status = status;
            outcomes.push(outcome);
            if status & consts::SERVER_MORE_RESULTS_EXISTS == 0 {
                return Ok(outcomes);
            }
        }
    }

    /// The next packet from the server (Sluice's own commands).
    pub(super) async fn next(&mut self) -> Result<bytes::Bytes> {
        Ok(
            read_packet(&mut self.stream, &mut self.rbuf, self.max_message)
                .await?
                .1,
        )
    }

    /// Reads a text result set whose column-count packet is `head`: its rows and the
    /// status of its end.
    async fn result_set(
        &mut self,
        head: &[u8],
        budget: &mut RowBudget,
        mut names: Option<&mut Vec<String>>,
    ) -> Result<(Outcome, u16)> {
        let columns = Reader::new(head).lenenc().ok_or_else(malformed)? as usize;
        for _ in 0..columns {
            let def = self.next().await?;
            if let Some(names) = names.as_deref_mut() {
                // catalog, schema, table, org_table, then the name.
                let mut r = Reader::new(&def);
                let name = (0..4)
                    .try_for_each(|_| r.lenenc_str().map(|_| ()))
                    .and_then(|_| r.lenenc_str())
                    .unwrap_or_default();
                names.push(String::from_utf8_lossy(name).into_owned());
            }
        }
        if self.caps & consts::CLIENT_DEPRECATE_EOF == 0 {
            self.next().await?;
        }
        let mut rows = Vec::new();
        let mut dropped = false;
        budget.next_statement();
        loop {
            let p = self.next().await?;
            if resp::is_err(&p) {
                let code = resp::ErrPacket::parse(&p).map_or(0, |e| e.code);
                return Ok((
                    Outcome::Failed {
                        code: code.into(),
                        message: engine_error(code),
                    },
                    0,
                ));
            }
            if resp::is_rows_end(p.first().copied().unwrap_or(0), p.len(), self.caps) {
                let status = if self.caps & consts::CLIENT_DEPRECATE_EOF != 0 {
                    resp::OkPacket::parse(&p, self.caps).map_or(0, |ok| ok.status)
                } else {
                    let mut r = Reader::new(&p);
                    r.skip(3).and_then(|_| r.u16()).unwrap_or(0)
                };
                if dropped {
                    let message = TOO_LARGE.to_string();
                    return Ok((Outcome::Failed { code: 0, message }, status));
                }
                return Ok((Outcome::Rows(rows), status));
            }
            if dropped || !budget.take(p.len()) {
                dropped = true;
                rows = Vec::new();
                continue;
            }
            let mut r = Reader::new(&p);
            let mut row = Vec::with_capacity(columns);
            for _ in 0..columns {
                if r.peek() == Some(0xfb) {
                    r.skip(1);
                    row.push(None);
                } else {
                    row.push(Some(r.lenenc_str().ok_or_else(malformed)?.to_vec()));
                }
            }
            rows.push(row);
        }
    }
}

fn malformed() -> Error {
    Error::new(Kind::Desync, Side::Server, "malformed result set")
}
