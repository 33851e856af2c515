//! The PostgreSQL side of the key-value path: Sluice's own login (UTF8, ISO dates),
//! rounds sent as one simple Query, or, when a grouped lookup passes its keys as one
//! array parameter, as extended-protocol messages with one Sync (the lookup prepared
//! once per connection), read as text rows; the table catalog from
//! pg_attribute and pg_index (the HandlerSocket "database" is a schema, the primary key
//! is called PRIMARY), and the PostgreSQL dialect of the statements.

use super::{ServerConn, login};
use crate::backend::{Credentials, LoginError};
use crate::error::{Error, Kind, Result, Side};
use crate::kv::sql::{Dialect, quote_doubled};
use crate::kv::table::{ColKind, Column, DefaultKind, Index, Table, fit_text};
use crate::kv::{
    KvBackend, KvConn, Outcome, Piece, RowBudget, TOO_LARGE, joined, lenient_int, push_int,
};
use crate::stream::write_all_flush;
use bytes::BytesMut;
use sluice_wire_pg::{encode, msg};
use std::collections::HashMap;

pub struct PgKv {
    /// Where each new connection goes (the router's pick at that moment).
    pub targets: crate::backend::Targets,
    pub creds: Credentials,
    pub database: String,
}

/// Most statements one key-value connection keeps prepared (one per index and list of
/// returned columns in use); past it, lookups are parsed each time.
const MAX_PREPARED: usize = 64;

/// A key-value server connection and the statements prepared on it.
pub struct PgKvConn {
    conn: ServerConn,
    /// Prepared statements by text: their numbers (named `sluice_kv_N`; a number is
    /// never used twice on a connection).
    prepared: HashMap<Vec<u8>, u32>,
    last: u32,
    /// Statements that may exist on the server though Sluice no longer counts on them
    /// (their round failed): closed in the next round.
    orphans: Vec<u32>,
}

impl KvBackend for PgKv {
    type Conn = PgKvConn;

    async fn connect(&self) -> Result<PgKvConn> {
        let conn = self.login().await?;
        Ok(PgKvConn {
            conn,
            prepared: HashMap::new(),
            last: 0,
            orphans: Vec::new(),
        })
    }

    async fn describe(&self, c: &mut PgKvConn, db: &str, table: &str) -> Result<Option<Table>> {
        describe(&mut c.conn, db, table).await
    }

    fn dialect(&self) -> &dyn Dialect {
        &PgDialect
    }
}

impl PgKv {
    async fn login(&self) -> Result<ServerConn> {
        let mut params = vec![
            ("user".to_string(), self.creds.user.clone()),
            ("client_encoding".to_string(), "UTF8".to_string()),
            ("DateStyle".to_string(), "ISO".to_string()),
            // Literals quote by doubling only: backslashes must be plain characters.
            ("standard_conforming_strings".to_string(), "on".to_string()),
        ];
        if !self.database.is_empty() {
            params.push(("database".to_string(), self.database.clone()));
        }
        let target = (self.targets)().await?;
        match login(&target, &params, &self.creds).await {
            Ok(c)
                if c.reported
                    .get("standard_conforming_strings")
                    .map(String::as_str)
                    == Some("on") =>
            {
                Ok(c)
            }
            Ok(_) => Err(Error::server_gone(
                "the server does not use standard_conforming_strings = on; refusing to send it literals",
            )),
            Err(LoginError::Proxy(e)) => Err(e),
            Err(LoginError::Server(body)) => {
                let m = msg::error_field(&body[..], b'M')
                    .unwrap_or("login refused")
                    .to_owned();
                Err(Error::server_gone(format!("login refused: {m}")))
            }
        }
    }
}

/// A table's columns and indexes from the catalog; None when there is no such table.
async fn describe(c: &mut ServerConn, db: &str, table: &str) -> Result<Option<Table>> {
    let lit = |s: &str| {
        let mut out = Vec::new();
        PgDialect.text(&mut out, s.as_bytes());
        String::from_utf8_lossy(&out).into_owned()
    };
    let (schema, name) = (lit(db), lit(table));
    let rel = format!(
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = {schema} AND c.relname = {name}"
    );
    let q = format!(
        "SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, \
             pg_get_expr(d.adbin, d.adrelid), a.attidentity <> '', t.typcategory \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = (SELECT c.oid {rel}) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum; \
             SELECT i.relname, x.indisunique, x.indisprimary, array_to_string(x.indkey, ' ') \
             FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid \
             WHERE x.indrelid = (SELECT c.oid {rel}) AND x.indpred IS NULL \
             ORDER BY x.indisprimary DESC, x.indisunique DESC, i.oid"
    );
    let mut msg = BytesMut::new();
    encode::query(&mut msg, q.as_bytes());
    let out = c.kv_round(&msg).await?;
    let (Some(Outcome::Rows(cols)), Some(Outcome::Rows(keys))) = (out.first(), out.get(1)) else {
        return Ok(None);
    };
    let text = |v: &Option<Vec<u8>>| {
        String::from_utf8_lossy(v.as_deref().unwrap_or_default()).into_owned()
    };
    let mut attnums = Vec::new();
    let mut columns = Vec::new();
    for r in cols.iter().filter(|r| r.len() >= 7) {
        attnums.push(text(&r[0]));
        let ty = text(&r[2]);
        let default = r[4]
            .as_deref()
            .map(|d| String::from_utf8_lossy(d).into_owned());
        let serial = default
            .as_deref()
            .is_some_and(|d| d.starts_with("nextval("));
        let kind = kind_of(&ty, r[6].as_deref());
        columns.push(Column {
            name: text(&r[1]),
            charset: matches!(kind, ColKind::Text | ColKind::Blob).then(|| "utf8".to_string()),
            max_chars: max_chars(&ty),
            kind,
            type_name: ty,
            nullable: r[3].as_deref() != Some(b"t"),
            generated: serial || r[5].as_deref() == Some(b"t"),
            default: match default {
                None => DefaultKind::Null,
                Some(d) if d.contains('(') || d.to_ascii_uppercase().starts_with("CURRENT_") => {
                    DefaultKind::Expression
                }
                Some(_) => DefaultKind::Literal,
            },
        });
    }
    if columns.is_empty() {
        return Ok(None);
    }
    let mut indexes = Vec::new();
    for r in keys.iter().filter(|r| r.len() >= 4) {
        let positions: Option<Vec<usize>> = text(&r[3])
            .split(' ')
            .map(|n| attnums.iter().position(|a| a == n))
            .collect();
        let Some(columns) = positions else { continue };
        let primary = r[2].as_deref() == Some(b"t");
        indexes.push(Index {
            name: if primary {
                "PRIMARY".to_string()
            } else {
                text(&r[0])
            },
            columns,
            unique: r[1].as_deref() == Some(b"t"),
        });
    }
    Ok(Some(Table::new(db, table, columns, indexes)))
}

/// A column's kind from its `format_type` and type category.
fn kind_of(ty: &str, category: Option<&[u8]>) -> ColKind {
    let bits = match ty {
        "smallint" => 16,
        "integer" => 32,
        "bigint" => 64,
        "text" | "bytea" | "json" | "jsonb" | "xml" => return ColKind::Blob,
        _ if category == Some(b"S") => return ColKind::Text,
        _ => return ColKind::Other,
    };
    ColKind::Int {
        min: -(1i128 << (bits - 1)),
        max: (1i128 << (bits - 1)) - 1,
    }
}

fn max_chars(ty: &str) -> Option<usize> {
    let rest = ty
        .strip_prefix("character varying(")
        .or_else(|| ty.strip_prefix("character("))?;
    rest.split(')').next()?.parse().ok()
}

/// PostgreSQL's SQL: double-quoted names, standard strings, NULLS FIRST ascending.
pub struct PgDialect;

impl PgDialect {
    fn text(&self, out: &mut Vec<u8>, v: &[u8]) {
        quote_doubled(out, b'\'', v);
    }
}

impl Dialect for PgDialect {
    fn ident(&self, out: &mut Vec<u8>, name: &str) {
        quote_doubled(out, b'"', name.as_bytes());
    }

    fn literal(&self, out: &mut Vec<u8>, col: &Column, v: Option<&[u8]>) {
        let Some(v) = v else {
            out.extend_from_slice(b"NULL");
            return;
        };
        match col.kind {
            ColKind::Int { .. } => push_int(out, lenient_int(col.kind, v)),
            ColKind::Text | ColKind::Blob => self.text(out, &fit_text(col, v)),
            ColKind::Other => self.text(out, v),
        }
    }

    fn order(&self, out: &mut Vec<u8>, descending: bool) {
        out.extend_from_slice(if descending {
            b" DESC NULLS LAST"
        } else {
            b" ASC NULLS FIRST"
        });
    }

    fn limit(&self, out: &mut Vec<u8>, offset: u64, count: u64) {
        out.extend_from_slice(format!(" LIMIT {count} OFFSET {offset}").as_bytes());
    }

    fn as_signed(&self, out: &mut Vec<u8>, col: &Column) {
        let mut name = Vec::new();
        self.ident(&mut name, &col.name);
        let name = String::from_utf8_lossy(&name);
        let expr = match col.kind {
            ColKind::Int { .. } => format!("CAST({name} AS bigint)"),
            _ if matches!(
                col.type_name.split('(').next(),
                Some("numeric" | "real" | "double precision")
            ) =>
            {
                format!("CAST(round({name}) AS bigint)")
            }
            _ => "CAST(NULL AS bigint)".to_string(),
        };
        out.extend_from_slice(expr.as_bytes());
    }

    fn zero(&self, out: &mut Vec<u8>, col: &Column) {
        let z: &[u8] = match col.kind {
            ColKind::Int { .. } => b"0",
            ColKind::Text | ColKind::Blob => b"''",
            ColKind::Other => match col.type_name.split(['(', ' ']).next() {
                Some("numeric" | "real" | "double") => b"0",
                Some("boolean") => b"false",
                Some("date") => b"'epoch'",
                Some("timestamp") => b"'epoch'",
                _ => b"DEFAULT",
            },
        };
        out.extend_from_slice(z);
    }

    fn failure_aborts_transaction(&self) -> bool {
        true
    }

    fn stale_statement(&self, o: &Outcome) -> bool {
        // "cached plan must not change result type"; "prepared statement does not exist".
        matches!(o, Outcome::Failed { message, .. } if message == "0A000" || message == "26000")
    }

    fn no_columns(&self) -> &'static [u8] {
        b" DEFAULT VALUES"
    }

    fn accepts(&self, v: &[u8]) -> bool {
        !v.contains(&0) && std::str::from_utf8(v).is_ok()
    }

    fn key_in(&self, out: &mut Vec<u8>, keys: &[i128]) -> Option<Vec<u8>> {
        out.extend_from_slice(b" = ANY($1)");
        let mut array = vec![b'{'];
        for (i, &k) in keys.iter().enumerate() {
            if i > 0 {
                array.push(b',');
            }
            push_int(&mut array, k);
        }
        array.push(b'}');
        Some(array)
    }

    fn returning(&self, out: &mut Vec<u8>, generated: &Column) {
        out.extend_from_slice(b" RETURNING ");
        self.ident(out, &generated.name);
    }
}

/// An engine error number the reference would answer for a SQLSTATE, where one fits.
fn engine_error(state: &str) -> String {
    match state {
        "23505" => "121".into(),
        "55P03" => "146".into(),
        "40P01" => "149".into(),
        other => other.to_string(),
    }
}

impl KvConn for PgKvConn {
    async fn run(&mut self, stmts: &[Piece<'_>]) -> Result<Vec<Outcome>> {
        let mut out = BytesMut::new();
        if stmts.iter().all(|s| s.param.is_none()) {
            encode::query(&mut out, &joined(stmts));
            return self.conn.kv_round(&out).await;
        }
        for n in std::mem::take(&mut self.orphans) {
            encode::target(&mut out, b'C', b'S', &statement_name(n));
        }
        // Which statements' Parse goes out in this round.
        let mut fresh = vec![false; stmts.len()];
        for (s, fresh) in stmts.iter().zip(&mut fresh) {
            let name = match s.param {
                Some(_) => self.prepare(s.sql, &mut out, fresh),
                None => {
                    encode::parse(&mut out, b"", s.sql, &[0, 0]);
                    Vec::new()
                }
            };
            let mut rest = vec![0, 0];
            match s.param {
                Some(p) => {
                    rest.extend_from_slice(&1i16.to_be_bytes());
                    rest.extend_from_slice(&(p.len() as i32).to_be_bytes());
                    rest.extend_from_slice(p);
                }
                None => rest.extend_from_slice(&[0, 0]),
            }
            rest.extend_from_slice(&[0, 0]);
            encode::bind(&mut out, b"", &name, &rest);
            encode::target(&mut out, b'D', b'P', b"");
            encode::execute(&mut out, b"", 0);
        }
        encode::sync(&mut out);
        let outcomes = self.conn.kv_round(&out).await?;
        if let Some(at) = outcomes
            .iter()
            .position(|o| matches!(o, Outcome::Failed { message, .. } if message != TOO_LARGE))
        {
            // The server skipped the Parses after the failure and kept those before it.
            // The failing statement itself may be a stale copy (its table's columns
            // changed type: 0A000): forget it too, and close it in the next round.
            for (i, s) in stmts.iter().enumerate().skip(at) {
                if s.param.is_some()
                    && (i == at || fresh[i])
                    && let Some(n) = self.prepared.remove(s.sql)
                {
                    self.orphans.push(n);
                }
            }
        }
        Ok(outcomes)
    }
}

impl PgKvConn {
    /// The name of `sql`'s prepared statement, writing its Parse first where the
    /// connection lacks it (`fresh` says so); empty (the unnamed statement, parsed
    /// here) when the connection holds as many as it may.
    fn prepare(&mut self, sql: &[u8], out: &mut BytesMut, fresh: &mut bool) -> Vec<u8> {
        if let Some(&n) = self.prepared.get(sql) {
            return statement_name(n);
        }
        if self.prepared.len() >= MAX_PREPARED {
            encode::parse(out, b"", sql, &[0, 0]);
            return Vec::new();
        }
        self.last += 1;
        let name = statement_name(self.last);
        encode::parse(out, &name, sql, &[0, 0]);
        self.prepared.insert(sql.to_vec(), self.last);
        *fresh = true;
        name
    }
}

fn statement_name(n: u32) -> Vec<u8> {
    format!("sluice_kv_{n}").into_bytes()
}

impl ServerConn {
    /// Sends `msgs` (a Query, or extended-protocol messages ending in Sync) and reads
    /// the answers up to ReadyForQuery: one outcome per statement run.
    async fn kv_round(&mut self, msgs: &[u8]) -> Result<Vec<Outcome>> {
        write_all_flush(&mut self.stream, msgs).await?;
        let mut outcomes = Vec::new();
        let mut rows: Option<Vec<crate::kv::rows::Row>> = None;
        let mut budget = RowBudget::new(self.max_message);
        let mut dropped = false;
        loop {
            let (tag, body) = self.read_frame().await?;
            match tag {
                msg::be::ROW_DESCRIPTION => {
                    budget.next_statement();
                    rows = Some(Vec::new());
                }
                msg::be::DATA_ROW => {
                    if dropped || !budget.take(body.len()) {
                        dropped = true;
                        rows = Some(Vec::new());
                        continue;
                    }
                    let row = data_row(&body).ok_or_else(malformed)?;
                    rows.get_or_insert_default().push(row);
                }
                msg::be::COMMAND_COMPLETE if std::mem::take(&mut dropped) => {
                    rows = None;
                    outcomes.push(Outcome::Failed {
                        code: 0,
                        message: TOO_LARGE.to_string(),
                    });
                }
                msg::be::COMMAND_COMPLETE => outcomes.push(match rows.take() {
                    Some(rows) => Outcome::Rows(rows),
                    None => {
                        let tag = msg::command_tag(&body).unwrap_or_default();
                        let affected = tag
                            .rsplit(|&b| b == b' ')
                            .next()
                            .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
                            .unwrap_or(0);
                        Outcome::Done {
                            affected,
                            insert_id: 0,
                        }
                    }
                }),
                msg::be::EMPTY_QUERY => outcomes.push(Outcome::Done {
                    affected: 0,
                    insert_id: 0,
                }),
                msg::be::ERROR_RESPONSE => {
                    rows = None;
                    dropped = false;
                    let state = msg::error_field(&body, b'C').unwrap_or("XX000");
                    outcomes.push(Outcome::Failed {
                        code: 0,
                        message: engine_error(state),
                    });
                }
                msg::be::READY_FOR_QUERY => {
                    self.status = msg::ready_status(&body).unwrap_or(b'E');
                    return Ok(outcomes);
                }
                _ => {}
            }
        }
    }
}

/// A DataRow's values as text (None: NULL).
fn data_row(body: &[u8]) -> Option<crate::kv::rows::Row> {
    let n = u16::from_be_bytes(body.get(..2)?.try_into().ok()?) as usize;
    let mut at = 2;
    let mut row = Vec::with_capacity(n);
    for _ in 0..n {
        let len = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if len < 0 {
            row.push(None);
        } else {
            let len = len as usize;
            row.push(Some(body.get(at..at + len)?.to_vec()));
            at += len;
        }
    }
    Some(row)
}

fn malformed() -> Error {
    Error::new(Kind::Desync, Side::Server, "malformed data row")
}
