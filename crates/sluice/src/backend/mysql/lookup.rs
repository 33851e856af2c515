//! One query of Sluice's own with parameters, on a MySQL/MariaDB connection: a
//! prepared statement (COM_STMT_PREPARE, COM_STMT_EXECUTE with the values bound as
//! strings, COM_STMT_CLOSE), so that a value such as a client's user name is never
//! spliced into SQL text. Used to look up stored secrets (`auth_query`). Rows come in
//! the binary protocol: text columns (strings, blobs, decimals) are read as they are,
//! integers as numbers, other types as NULL.

use super::ServerConn;
use crate::backend::Row;
use crate::error::{Error, Kind, Result, Side};
use crate::stream::write_all_flush;
use bytes::BytesMut;
use sluice_wire_mysql::codec::{Reader, put_lenenc_str};
use sluice_wire_mysql::{consts, packet, resp};

impl ServerConn {
    /// Runs `sql` with `params` bound as strings and returns its first row.
    async fn lookup_row(&mut self, sql: &str, params: &[&str]) -> Result<Row> {
        let mut p = vec![consts::COM_STMT_PREPARE];
        p.extend_from_slice(sql.as_bytes());
        self.send_command(&p).await?;
        let first = self.next().await?;
        if resp::is_err(&first) {
            return Ok(Err(err_message(&first)));
        }
        let mut r = Reader::new(&first);
        let (Some(0), Some(id), Some(columns), Some(count)) = (r.u8(), r.u32(), r.u16(), r.u16())
        else {
            return Err(malformed());
        };
        // Parameter then column definitions, each run ended by an EOF (not with
        // DEPRECATE_EOF).
        for n in [count, columns] {
            self.skip_definitions(usize::from(n)).await?;
        }
        let answer = if usize::from(count) == params.len() {
            self.execute(id, params).await
        } else {
            Ok(Err(format!(
                "the query takes {count} parameters, Sluice gives {}",
                params.len()
            )))
        };
        let mut close = vec![consts::COM_STMT_CLOSE];
        close.extend_from_slice(&id.to_le_bytes());
        self.send_command(&close).await?;
        answer
    }

    async fn execute(&mut self, id: u32, params: &[&str]) -> Result<Row> {
        let mut p = vec![consts::COM_STMT_EXECUTE];
        p.extend_from_slice(&id.to_le_bytes());
        p.push(0);
        p.extend_from_slice(&1u32.to_le_bytes());
        if !params.is_empty() {
            p.resize(p.len() + params.len().div_ceil(8), 0);
            p.push(1);
            for _ in params {
                p.extend_from_slice(&[consts::MYSQL_TYPE_STRING, 0]);
            }
            for v in params {
                put_lenenc_str(&mut p, v.as_bytes());
            }
        }
        self.send_command(&p).await?;
        let head = self.next().await?;
        if resp::is_err(&head) {
            return Ok(Err(err_message(&head)));
        }
        if resp::is_ok(&head) {
            return Ok(Ok(None));
        }
        let n = Reader::new(&head).lenenc().ok_or_else(malformed)?;
        let mut types = Vec::new();
        for _ in 0..n {
            types.push(column_type(&self.next().await?).ok_or_else(malformed)?);
        }
        if self.caps & consts::CLIENT_DEPRECATE_EOF == 0 {
            self.next().await?;
        }
        let mut row = None;
        loop {
            let p = self.next().await?;
            if resp::is_err(&p) {
                return Ok(Err(err_message(&p)));
            }
            if resp::is_rows_end(p.first().copied().unwrap_or(0), p.len(), self.caps) {
                break;
            }
            if row.is_none() {
                row = Some(binary_row(&p, &types).ok_or_else(malformed)?);
            }
        }
        Ok(Ok(row))
    }

    /// Skips `n` column or parameter definitions and the EOF after them.
    async fn skip_definitions(&mut self, n: usize) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        for _ in 0..n {
            self.next().await?;
        }
        if self.caps & consts::CLIENT_DEPRECATE_EOF == 0 {
            self.next().await?;
        }
        Ok(())
    }

    async fn send_command(&mut self, payload: &[u8]) -> Result<()> {
        let mut out = BytesMut::new();
        let mut seq = 0u8;
        packet::write_packet(&mut out, &mut seq, payload);
        Ok(write_all_flush(&mut self.stream, &out).await?)
    }
}

fn malformed() -> Error {
    Error::new(
        Kind::Desync,
        Side::Server,
        "malformed answer to a prepared statement of Sluice's",
    )
}

fn err_message(p: &[u8]) -> String {
    match resp::ErrPacket::parse(p) {
        Some(e) => format!("{} ({})", String::from_utf8_lossy(e.message), e.code),
        None => "error".to_owned(),
    }
}

/// A column definition's type: the fixed-length fields end the packet (0x0c, charset,
/// length, type, flags, decimals, filler), whatever extended metadata comes before.
fn column_type(def: &[u8]) -> Option<u8> {
    let fixed = def.get(def.len().checked_sub(13)?..)?;
    (fixed[0] == 0x0c).then_some(fixed[7])
}

/// A binary-protocol row: a 0x00 header, the NULL bitmap (offset 2), then the values.
fn binary_row(p: &[u8], types: &[u8]) -> Option<Vec<Option<String>>> {
    let mut r = Reader::new(p);
    if r.u8()? != 0 {
        return None;
    }
    let bitmap = r.take((types.len() + 9) / 8)?;
    let mut out = Vec::with_capacity(types.len());
    for (i, &ty) in types.iter().enumerate() {
        let bit = i + 2;
        if bitmap[bit / 8] & (1 << (bit % 8)) != 0 {
            out.push(None);
            continue;
        }
        let int = |b: &[u8]| b.iter().rev().fold(0u64, |a, &x| a << 8 | u64::from(x));
        out.push(match ty {
            consts::MYSQL_TYPE_TINY => Some(int(r.take(1)?).to_string()),
            consts::MYSQL_TYPE_SHORT | consts::MYSQL_TYPE_YEAR => Some(int(r.take(2)?).to_string()),
            consts::MYSQL_TYPE_LONG | consts::MYSQL_TYPE_INT24 => Some(int(r.take(4)?).to_string()),
            consts::MYSQL_TYPE_LONGLONG => Some(int(r.take(8)?).to_string()),
            consts::MYSQL_TYPE_FLOAT => r.skip(4).map(|_| None)?,
            consts::MYSQL_TYPE_DOUBLE => r.skip(8).map(|_| None)?,
            consts::MYSQL_TYPE_DATE
            | consts::MYSQL_TYPE_DATETIME
            | consts::MYSQL_TYPE_TIMESTAMP
            | consts::MYSQL_TYPE_TIME => {
                let n = r.u8()?;
                r.skip(usize::from(n)).map(|_| None)?
            }
            _ => Some(String::from_utf8_lossy(r.lenenc_str()?).into_owned()),
        });
    }
    Some(out)
}

impl crate::backend::Lookup for ServerConn {
    async fn query_row(&mut self, sql: &str, params: &[&str]) -> Result<Row> {
        self.lookup_row(sql, params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_column_types() {
        // plugin, authentication_string: two strings; a NULL third column (bit 4).
        let mut row = vec![0, 0b0001_0000];
        put_lenenc_str(&mut row, b"mysql_native_password");
        put_lenenc_str(&mut row, b"*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19");
        let types = [consts::MYSQL_TYPE_VAR_STRING, consts::MYSQL_TYPE_BLOB, 0xfe];
        let got = binary_row(&row, &types).unwrap();
        assert_eq!(got[0].as_deref(), Some("mysql_native_password"));
        assert_eq!(got[2], None);
        assert_eq!(binary_row(&row[..row.len() - 1], &types), None);
        let mut def = vec![3, b'd', b'e', b'f'];
        def.extend_from_slice(&[
            0x0c,
            33,
            0,
            0,
            1,
            0,
            0,
            consts::MYSQL_TYPE_BLOB,
            0,
            0,
            0,
            0,
            0,
        ]);
        assert_eq!(column_type(&def), Some(consts::MYSQL_TYPE_BLOB));
        assert_eq!(column_type(&def[..5]), None);
    }
}
