//! One query of Sluice's own with parameters, on a PostgreSQL connection: the
//! extended protocol (Parse, Bind, Execute, Sync of the unnamed statement), so that a
//! value such as a client's user name is bound as a parameter and never becomes SQL
//! text. Used to look up stored secrets (`auth_query`).

use super::ServerConn;
use crate::backend::Row;
use crate::error::{Error, Kind, Result, Side};
use crate::stream::write_all_flush;
use bytes::BytesMut;
use sluice_wire_pg::{encode, msg};

impl ServerConn {
    /// Runs `sql` with `params` bound as text parameters (types left to the server) and
    /// reads its answer up to ReadyForQuery.
    async fn lookup_row(&mut self, sql: &str, params: &[&str]) -> Result<Row> {
        let mut out = BytesMut::new();
        encode::parse(&mut out, b"", sql.as_bytes(), &[0, 0]);
        let mut rest = BytesMut::new();
        let values: Vec<(i16, Option<&[u8]>)> =
            params.iter().map(|p| (0, Some(p.as_bytes()))).collect();
        encode::bind_rest(&mut rest, &values, &[0, 0]);
        encode::bind(&mut out, b"", b"", &rest);
        encode::execute(&mut out, b"", 0);
        encode::sync(&mut out);
        write_all_flush(&mut self.stream, &out).await?;
        let (mut error, mut row) = (None, None);
        loop {
            let (tag, body) = self.read_frame().await?;
            match tag {
                msg::be::READY_FOR_QUERY => {
                    self.status = msg::ready_status(&body).unwrap_or(b'E');
                    break;
                }
                msg::be::ERROR_RESPONSE if error.is_none() => {
                    let field = |f| msg::error_field(&body, f).unwrap_or_default();
                    error = Some(format!("{} ({})", field(b'M'), field(b'C')));
                }
                msg::be::DATA_ROW if row.is_none() => {
                    row = Some(columns(&body).ok_or_else(|| {
                        Error::new(Kind::Desync, Side::Server, "malformed DataRow")
                    })?);
                }
                msg::be::PARAMETER_STATUS => {
                    if let Some((k, v)) = msg::parameter_status(&body) {
                        let (k, v) = (k.to_owned(), v.to_owned());
                        self.set_reported(&k, &v);
                    }
                }
                _ => {}
            }
        }
        Ok(match error {
            Some(e) => Err(e),
            None => Ok(row),
        })
    }
}

/// The columns of a DataRow, as text (None for NULL); None if malformed.
fn columns(row: &[u8]) -> Option<Vec<Option<String>>> {
    let n = i16::from_be_bytes(row.get(..2)?.try_into().ok()?);
    let mut at = 2usize;
    let mut out = Vec::with_capacity(usize::try_from(n).ok()?);
    for _ in 0..n {
        let len = i32::from_be_bytes(row.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if len < 0 {
            out.push(None);
            continue;
        }
        let end = at.checked_add(usize::try_from(len).ok()?)?;
        out.push(Some(
            String::from_utf8_lossy(row.get(at..end)?).into_owned(),
        ));
        at = end;
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
    #[test]
    fn columns_of_a_data_row() {
        let mut row = vec![0, 3];
        row.extend_from_slice(&2i32.to_be_bytes());
        row.extend_from_slice(b"ab");
        row.extend_from_slice(&(-1i32).to_be_bytes());
        row.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(
            super::columns(&row),
            Some(vec![Some("ab".into()), None, Some(String::new())])
        );
        assert_eq!(super::columns(&row[..row.len() - 1]), None);
        let mut long = vec![0, 1];
        long.extend_from_slice(&100i32.to_be_bytes());
        assert_eq!(super::columns(&long), None);
    }
}
