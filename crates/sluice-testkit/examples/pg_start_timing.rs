//! Prints how long the testkit's PostgreSQL operations take on this machine:
//! `cargo run -p sluice-testkit --example pg_start_timing`. (Set
//! `SLUICE_TESTKIT_NO_TEMPLATE=1` to compare with running initdb per server.)

use std::time::Instant;

use sluice_testkit::PgServer;

fn main() -> anyhow::Result<()> {
    for i in 0..3 {
        let t = Instant::now();
        let server = PgServer::start()?;
        let started = t.elapsed();
        let t = Instant::now();
        drop(server);
        println!("start #{i}: {started:?}  (drop {:?})", t.elapsed());
    }
    let mut server = PgServer::start()?;
    let t = Instant::now();
    server.psql("postgres", "select 1")?;
    println!("psql select 1: {:?}", t.elapsed());
    let t = Instant::now();
    server.stop();
    println!("stop: {:?}", t.elapsed());
    let t = Instant::now();
    server.restart()?;
    println!("restart: {:?}", t.elapsed());
    let t = Instant::now();
    server.kill();
    println!("kill: {:?}", t.elapsed());
    let t = Instant::now();
    server.restart()?;
    println!("restart after kill: {:?}", t.elapsed());
    Ok(())
}
