//! `setup`: the database and the `sluice_bench` table the SQL scenarios (and kv-lookup)
//! read, created on the server directly: `id` 1..=keys as primary key, an integer `k`, a
//! 120-character `c` and a 60-character `pad` (sysbench's shape). A table that already
//! has exactly those keys is left as it is, so repeated runs do not refill it.

use super::sql::{Protocol, SqlConn, SqlTarget, TABLE, check_identifier};
use anyhow::{Context, Result, bail};
use mysql_async::prelude::Queryable;
use std::fmt::Write as _;

/// Rows per INSERT when filling a MySQL table.
const BATCH: u64 = 1000;

/// The `c` value of row `id` (deterministic, 120 characters).
fn c_value(id: u64) -> String {
    format!(
        "{id:0>11}-{:0>108}",
        id.wrapping_mul(2_654_435_761) % 1_000_000_007
    )
}

/// Creates `t.db` unless it is there.
pub async fn ensure_database(t: &SqlTarget) -> Result<()> {
    check_identifier("database", &t.db)?;
    match t.protocol {
        Protocol::Pg => {
            let mut admin = SqlConn::connect(t, "postgres").await?;
            let SqlConn::Pg { client, .. } = &mut admin else {
                bail!("not a PostgreSQL connection");
            };
            let look = "SELECT 1 FROM pg_database WHERE datname = $1";
            let exists = client
                .query_opt(look, &[&t.db])
                .await
                .context("look for the database")?
                .is_some();
            if !exists {
                let created = client
                    .batch_execute(&format!("CREATE DATABASE {}", t.db))
                    .await;
                // Another session (the server's start script) may have created it
                // meanwhile.
                if created.is_err() && client.query_opt(look, &[&t.db]).await?.is_none() {
                    created.with_context(|| format!("create database {}", t.db))?;
                }
            }
            admin.close().await;
        }
        Protocol::Mysql => {
            let mut admin = SqlConn::connect(t, "").await?;
            admin
                .simple(&format!("CREATE DATABASE IF NOT EXISTS {}", t.db))
                .await
                .with_context(|| format!("create database {}", t.db))?;
            admin.close().await;
        }
    }
    Ok(())
}

/// Creates `t.db` and the table with `keys` rows unless they are there already.
/// Returns whether the table was (re)filled.
pub async fn ensure_table(t: &SqlTarget, keys: u64) -> Result<bool> {
    if keys == 0 || keys > i32::MAX as u64 {
        bail!("keys must be between 1 and {}", i32::MAX);
    }
    ensure_database(t).await?;
    let mut c = SqlConn::connect(t, &t.db).await?;
    let ddl = format!(
        "CREATE TABLE IF NOT EXISTS {TABLE} (id integer NOT NULL PRIMARY KEY, \
         k integer NOT NULL DEFAULT 0, c char(120) NOT NULL DEFAULT '', \
         pad char(60) NOT NULL DEFAULT '')"
    );
    c.simple(&ddl).await.context("create the table")?;
    let (count, max) = count_and_max(&mut c).await?;
    if count == keys && max == keys {
        c.close().await;
        return Ok(false);
    }
    c.simple(&format!("TRUNCATE {TABLE}"))
        .await
        .context("empty the table")?;
    match &mut c {
        SqlConn::Pg { client, .. } => {
            let fill = format!(
                "INSERT INTO {TABLE} (id, k, c, pad) SELECT g, g % 1000, \
                 lpad(g::text, 11, '0') || '-' || lpad(((g::bigint * 2654435761) % 1000000007)::text, 108, '0'), \
                 '' FROM generate_series(1, {keys}) g"
            );
            client
                .batch_execute(&fill)
                .await
                .context("fill the table")?;
            client
                .batch_execute(&format!("VACUUM ANALYZE {TABLE}"))
                .await
                .context("analyze the table")?;
        }
        SqlConn::My { conn, .. } => {
            let mut from = 1;
            while from <= keys {
                let to = (from + BATCH - 1).min(keys);
                let mut sql = format!("INSERT INTO {TABLE} (id, k, c, pad) VALUES ");
                for id in from..=to {
                    if id > from {
                        sql.push(',');
                    }
                    let _ = write!(sql, "({id},{},'{}','')", id % 1000, c_value(id));
                }
                conn.query_drop(sql).await.context("fill the table")?;
                from = to + 1;
            }
            conn.query_drop(format!("ANALYZE TABLE {TABLE}"))
                .await
                .context("analyze the table")?;
        }
    }
    let (count, max) = count_and_max(&mut c).await?;
    if count != keys || max != keys {
        bail!("the table has {count} rows up to id {max} after filling, not {keys}");
    }
    c.close().await;
    Ok(true)
}

async fn count_and_max(c: &mut SqlConn) -> Result<(u64, u64)> {
    let sql = format!("SELECT count(*), coalesce(max(id), 0) FROM {TABLE}");
    match c {
        SqlConn::Pg { client, .. } => {
            let row = client.query_one(&sql, &[]).await.context("count rows")?;
            let count: i64 = row.try_get(0)?;
            let max: i32 = row.try_get(1)?;
            Ok((count.max(0) as u64, max.max(0) as u64))
        }
        SqlConn::My { conn, .. } => {
            let row: Option<(u64, u64)> = conn.query_first(sql).await.context("count rows")?;
            Ok(row.unwrap_or((0, 0)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_values_are_120_characters() {
        for id in [1, 42, 99_999_999, i32::MAX as u64] {
            assert_eq!(c_value(id).len(), 120, "{id}");
        }
    }

    #[test]
    fn identifiers() {
        assert!(check_identifier("db", "bench_1").is_ok());
        assert!(check_identifier("db", "").is_err());
        assert!(check_identifier("db", "a;b").is_err());
        assert!(check_identifier("db", "a b").is_err());
    }
}
