//! The admin console: a command (admin/command.rs) runs against the process's shared
//! context and answers a [`Table`] or a line of text, which the console of each
//! protocol (`frontend/pg/admin.rs`, `frontend/mysql/admin.rs`) encodes as an ordinary
//! result set, so psql, the mysql client or any BI tool reads it. It sits beside the
//! flow: it reads what the flow keeps (pools, topology, clients, counters, digests,
//! rules) and changes only what the flow asks on its own (pauses, a server's offline
//! mark, the book of clients, the digests). Metrics and the dashboard over HTTP
//! (admin/http.rs) read the same tables. One command per file, under `show/` and here.

pub mod command;
pub mod http;
mod metrics;
mod show;
pub mod table;

pub use command::{COMMANDS, Command};
pub use table::{Cell, Table, Type};

use crate::shared::Shared;
use std::sync::Arc;

/// A command's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Rows(Table),
    /// Done: what happened, in a line (a notice on PostgreSQL, an OK's info on MySQL).
    Done(String),
}

/// The console's product name, as `SHOW VERSION` and the MySQL console's greeting say.
pub const PRODUCT: &str = concat!("Sluice ", env!("CARGO_PKG_VERSION"));

/// Why a command was not carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Not a command, or bad arguments (SQLSTATE 42601, MySQL 1064); otherwise the
    /// command could not be done (55000, MySQL 1105).
    pub syntax: bool,
    pub message: String,
}

impl Refusal {
    pub fn sqlstate(&self) -> &'static str {
        if self.syntax { "42601" } else { "55000" }
    }

    pub fn mysql_code(&self) -> u16 {
        if self.syntax { 1064 } else { 1105 }
    }
}

/// Runs one console command.
pub async fn execute(shared: &Arc<Shared>, sql: &str) -> Result<Reply, Refusal> {
    let command = command::parse(sql).map_err(|message| Refusal {
        syntax: true,
        message,
    })?;
    if let Command::Show { what, order, limit } = &command {
        // A column ORDER BY does not have is the command's own mistake.
        return show::table(shared, *what)
            .shape(order, *limit)
            .map(Reply::Rows)
            .map_err(|message| Refusal {
                syntax: true,
                message,
            });
    }
    if !matches!(command, Command::Variables(_)) {
        tracing::info!(command = %sql.trim(), "admin command");
    }
    run(shared, command).await.map_err(|message| Refusal {
        syntax: false,
        message,
    })
}

async fn run(shared: &Arc<Shared>, command: Command) -> Result<Reply, String> {
    match command {
        Command::Show { what, order, limit } => show::table(shared, what)
            .shape(&order, limit)
            .map(Reply::Rows),
        Command::Variables(names) => Ok(Reply::Rows(show::variables(shared, &names))),
        Command::Reload => shared.control.reload().await.map(Reply::Done),
        Command::Pause(cluster) => pause(shared, cluster.as_deref(), true),
        Command::Resume(cluster) => pause(shared, cluster.as_deref(), false),
        Command::SetServer(name, offline) => {
            if !shared.config.load().servers.contains_key(&name) {
                return Err(format!("SET SERVER: no server \"{name}\""));
            }
            shared.topology.set_offline(&name, offline);
            let state = if offline { "OFFLINE" } else { "ONLINE" };
            Ok(Reply::Done(format!("server \"{name}\" is {state}")))
        }
        Command::KillClient(id) => match shared.book.kill(id) {
            true => Ok(Reply::Done(format!("client {id} killed"))),
            false => Err(format!("KILL CLIENT: no client {id}")),
        },
        Command::ResetDigests => {
            if let Some(d) = &shared.digests {
                d.reset();
            }
            Ok(Reply::Done("digests reset".into()))
        }
        Command::Shutdown(wait) => {
            shared.control.request_shutdown(wait);
            Ok(Reply::Done(if wait {
                "shutting down once transactions finish".into()
            } else {
                "shutting down".into()
            }))
        }
    }
}

fn pause(shared: &Shared, cluster: Option<&str>, on: bool) -> Result<Reply, String> {
    if let Some(c) = cluster
        && !shared.config.load().clusters.contains_key(c)
    {
        let verb = if on { "PAUSE" } else { "RESUME" };
        return Err(format!("{verb}: no cluster \"{c}\""));
    }
    let what = cluster.map_or("every cluster".to_string(), |c| format!("cluster \"{c}\""));
    if on {
        shared.control.pause(cluster);
        Ok(Reply::Done(format!("{what} paused: new transactions wait")))
    } else {
        shared.control.resume(cluster);
        Ok(Reply::Done(format!("{what} resumed")))
    }
}
