//! `new-order`: a TPC-C-like order entry split the way Amoeba split DBT2 (the seed):
//! each new order is two transactions, one on the order tables (`bench_district`,
//! `bench_orders`) and one on the stock tables (`bench_stock`, `bench_order_line`), so
//! that with table rules sending the stock tables to a second cluster each transaction
//! stays on one. The same statements run against one server for the baseline.

use super::sql::{Protocol, SqlConn, SqlTarget};
use anyhow::{Context, Result};
use mysql_async::prelude::Queryable;

/// The districts new orders are spread over.
pub const DISTRICTS: u64 = 10;

/// The workload's statements, each with one key (`?`): a district, then an item.
pub fn texts() -> Vec<String> {
    [
        "UPDATE bench_district SET next_o_id = next_o_id + 1 WHERE d_id = ?",
        "INSERT INTO bench_orders (d_id) VALUES (?)",
        "UPDATE bench_stock SET quantity = quantity - 1 WHERE i_id = ?",
        "INSERT INTO bench_order_line (i_id) VALUES (?)",
    ]
    .map(String::from)
    .to_vec()
}

/// Creates the four tables through `t` (items 1..=`keys` in stock) unless they are
/// there with that many items. Returns whether it (re)filled them.
pub async fn ensure_tables(t: &SqlTarget, keys: u64) -> Result<bool> {
    super::setup::ensure_database(t).await?;
    let mut c = SqlConn::connect(t, &t.db).await?;
    let serial = match t.protocol {
        Protocol::Pg => "o_id bigserial PRIMARY KEY",
        Protocol::Mysql => "o_id bigint AUTO_INCREMENT PRIMARY KEY",
    };
    for ddl in [
        "CREATE TABLE IF NOT EXISTS bench_district (d_id integer PRIMARY KEY, next_o_id bigint NOT NULL)".to_string(),
        format!("CREATE TABLE IF NOT EXISTS bench_orders ({serial}, d_id integer NOT NULL)"),
        "CREATE TABLE IF NOT EXISTS bench_stock (i_id integer PRIMARY KEY, quantity bigint NOT NULL)".to_string(),
        format!("CREATE TABLE IF NOT EXISTS bench_order_line ({}, i_id integer NOT NULL)", serial.replace("o_id", "ol_id")),
    ] {
        c.simple(&ddl).await.with_context(|| format!("create: {ddl}"))?;
    }
    let items = count(&mut c, "SELECT count(*) FROM bench_stock").await?;
    let districts = count(&mut c, "SELECT count(*) FROM bench_district").await?;
    if items == keys && districts == DISTRICTS {
        c.close().await;
        return Ok(false);
    }
    for table in [
        "bench_district",
        "bench_orders",
        "bench_stock",
        "bench_order_line",
    ] {
        c.simple(&format!("DELETE FROM {table}")).await?;
    }
    let districts: Vec<String> = (1..=DISTRICTS).map(|d| format!("({d}, 1)")).collect();
    c.simple(&format!(
        "INSERT INTO bench_district VALUES {}",
        districts.join(",")
    ))
    .await?;
    let mut from = 1;
    while from <= keys {
        let to = (from + 999).min(keys);
        let rows: Vec<String> = (from..=to).map(|i| format!("({i}, 1000000)")).collect();
        c.simple(&format!(
            "INSERT INTO bench_stock VALUES {}",
            rows.join(",")
        ))
        .await
        .context("fill bench_stock")?;
        from = to + 1;
    }
    c.close().await;
    Ok(true)
}

async fn count(c: &mut SqlConn, sql: &str) -> Result<u64> {
    match c {
        SqlConn::Pg { client, .. } => {
            let n: i64 = client.query_one(sql, &[]).await?.try_get(0)?;
            Ok(n.max(0) as u64)
        }
        SqlConn::My { conn, .. } => Ok(conn.query_first::<u64, _>(sql).await?.unwrap_or(0)),
    }
}
