//! `SHOW LISTENERS`: every listener (SQL, HandlerSocket and the admin endpoints) with
//! its bound address and clients.

use crate::admin::table::{Table, Type};
use crate::shared::Shared;

pub fn table(shared: &Shared) -> Table {
    let config = shared.config.load();
    let mut t = Table::new(&[
        ("listener", Type::Text),
        ("protocol", Type::Text),
        ("address", Type::Text),
        ("cluster", Type::Text),
        ("pool", Type::Text),
        ("mode", Type::Text),
        ("route", Type::Text),
        ("auth", Type::Text),
        ("tls", Type::Text),
        ("clients", Type::Int),
        ("paused", Type::Text),
    ]);
    let clients = shared.book.all();
    let count = |name: &str| clients.iter().filter(|c| c.listener() == name).count();
    let bound = |name: &str, configured: &str| {
        shared
            .control
            .addr(name)
            .map_or(configured.to_string(), |a| a.to_string())
    };
    for l in config.listeners.values() {
        let paused = shared.control.is_paused(&l.cluster);
        t.push(vec![
            l.name.as_str().into(),
            l.protocol.as_str().into(),
            bound(&l.name, &l.address).into(),
            l.cluster.as_str().into(),
            l.pool.as_str().into(),
            config.pool_for(l).mode.as_str().into(),
            l.route.kind.as_str().into(),
            l.auth.as_str().into(),
            l.tls.as_str().into(),
            count(&l.name).into(),
            (if paused { "yes" } else { "no" }).into(),
        ]);
    }
    for h in config.handlersocket.values() {
        t.push(vec![
            h.name.as_str().into(),
            "handlersocket".into(),
            bound(&h.name, &h.address).into(),
            h.cluster.as_str().into(),
            None::<String>.into(),
            h.mode.as_str().into(),
            None::<String>.into(),
            None::<String>.into(),
            None::<String>.into(),
            None::<u64>.into(),
            "no".into(),
        ]);
    }
    let admin = [
        ("admin_mysql", "mysql-admin", &config.admin.mysql_address),
        ("admin_http", "http", &config.admin.http_address),
    ];
    for (name, protocol, address) in admin {
        if let Some(a) = address {
            t.push(vec![
                name.into(),
                protocol.into(),
                bound(name, a).into(),
                None::<String>.into(),
                None::<String>.into(),
                None::<String>.into(),
                None::<String>.into(),
                None::<String>.into(),
                None::<String>.into(),
                None::<u64>.into(),
                "no".into(),
            ]);
        }
    }
    t
}
