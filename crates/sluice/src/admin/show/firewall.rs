//! `SHOW FIREWALL`: the mode of each scope (`[firewall]`, listeners and users with a
//! mode of their own), the allowlist per user, and the firewall's counters.

use crate::admin::table::{Cell, Table, Type};
use crate::shared::Shared;
use std::sync::atomic::Ordering;

pub fn table(shared: &Shared) -> Table {
    let config = shared.config.load();
    let mut t = Table::new(&[
        ("scope", Type::Text),
        ("name", Type::Text),
        ("mode", Type::Text),
        ("allowed_digests", Type::Int),
        ("detected", Type::Int),
        ("refused", Type::Int),
        ("learned", Type::Int),
    ]);
    let fw = &shared.firewall;
    let entries = fw.entries();
    let c = |a: &std::sync::atomic::AtomicU64| Cell::from(a.load(Ordering::Relaxed));
    t.push(vec![
        "global".into(),
        None::<String>.into(),
        config.firewall.mode.as_str().into(),
        entries.len().into(),
        c(&fw.detected),
        c(&fw.refused),
        c(&fw.learned),
    ]);
    for l in config.listeners.values() {
        if let Some(m) = l.firewall {
            t.push(vec![
                "listener".into(),
                l.name.as_str().into(),
                m.as_str().into(),
                Cell::Null,
                Cell::Null,
                Cell::Null,
                Cell::Null,
            ]);
        }
    }
    let mut users: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    users.extend(
        config
            .users
            .values()
            .filter(|u| u.firewall.is_some())
            .map(|u| u.name.as_str()),
    );
    users.sort_unstable();
    users.dedup();
    for user in users {
        let mode = config.users.get(user).and_then(|u| u.firewall);
        let allowed = entries.iter().filter(|e| e.0 == user).count();
        t.push(vec![
            "user".into(),
            user.into(),
            mode.map(|m| m.as_str()).into(),
            allowed.into(),
            Cell::Null,
            Cell::Null,
            Cell::Null,
        ]);
    }
    t
}
