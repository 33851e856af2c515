//! The markdown of a failover file's rounds: what was done, a row per round with the
//! windows, the writes and the consistency check against the target, a row of medians,
//! the details of the writes and of the reads (which server answered after the
//! promotion), and the errors the clients saw.

use super::group::median;
use super::text::{NONE, cell, code, int, num, plural, protocol_name, seconds, truncate};
use crate::results::{FailoverReads, FailoverRecord};
use std::collections::BTreeMap;

/// Error messages listed per kind (writers, readers), most frequent first.
const MAX_ERRORS_LISTED: usize = 5;

/// Longest error message quoted, characters.
const MAX_ERROR_CHARS: usize = 200;

/// The failover section of a document.
pub(super) fn render(out: &mut String, records: &[FailoverRecord]) {
    let Some(first) = records.first() else {
        return;
    };
    let s = &first.settings;
    out.push_str(&format!(
        "### Failover: {}, then {}\n\n",
        cell(&s.kill),
        cell(&s.promote)
    ));
    out.push_str(&format!(
        "{} insert numbered rows (each its own sequence, a failed row never sent again) \
         through {}, {} run point selects through {}, over {} in transaction mode; after {} s \
         the primary is killed ({}) and a replica promoted {} ({}); the load goes on until {} \
         s after the kill. Sluice checks every server every {} ms and takes one for down after {} \
         failed checks: the target for the write window is under {} ms (health_interval × \
         health_failures + 1 s). {}, each on servers and a Sluice started afresh.\n\n",
        plural(s.writers, "writer", "writers"),
        code(&s.writes),
        plural(s.readers, "reader", "readers"),
        code(&s.reads),
        protocol_name(&s.protocol),
        seconds(s.kill_after_s),
        cell(&s.kill),
        if s.promote_after_s > 0.0 {
            format!("{} s later", seconds(s.promote_after_s))
        } else {
            "at once".to_string()
        },
        cell(&s.promote),
        seconds(s.run_after_s),
        int(s.health_interval_ms),
        s.health_failures,
        int(s.target_ms),
        plural(records.len(), "round", "rounds"),
    ));
    out.push_str(
        "Write window: from the kill to the first write the new primary acknowledged; after \
         the promotion: the part of it from the end of the promotion on (Sluice's own). \
         Read window: from the first failed read to the end of the last one (0: no read \
         failed), for the readers connected all along and for new clients, one after the \
         other 100 ms apart (log in, one read, leave: where the route itself stands). \
         Lost: acknowledged rows missing on the new primary; duplicated: rows there twice \
         (both must be 0).\n\n",
    );
    out.push_str(
        "| round | write window ms | after the promotion ms | read window ms | new clients' read \
         window ms | writes acknowledged | writes failed | lost | duplicated | target |\n",
    );
    out.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|\n");
    for r in records {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.round,
            r.write_window_ms.map_or(NONE.to_string(), |w| num(w, 0)),
            r.write_window_ms
                .map_or(NONE.to_string(), |w| num(w - r.promoted_ms, 0)),
            num(r.reads.window_ms, 0),
            num(r.new_clients.window_ms, 0),
            int(r.writes_acked),
            int(r.writes_failed),
            int(r.lost),
            int(r.duplicated),
            verdict(r)
        ));
    }
    if records.len() > 1 {
        let windows: Vec<f64> = records.iter().filter_map(|r| r.write_window_ms).collect();
        let w = if windows.len() == records.len() {
            median(windows).map_or(NONE.to_string(), |m| num(m, 0))
        } else {
            NONE.to_string()
        };
        let med = |f: fn(&FailoverRecord) -> f64| {
            median(records.iter().map(f)).map_or(NONE.to_string(), |m| num(m, 0))
        };
        let after: Vec<f64> = records
            .iter()
            .filter_map(|r| r.write_window_ms.map(|w| w - r.promoted_ms))
            .collect();
        let after = if after.len() == records.len() {
            median(after).map_or(NONE.to_string(), |m| num(m, 0))
        } else {
            NONE.to_string()
        };
        let all = |f: fn(&FailoverRecord) -> u64| int(records.iter().map(f).sum());
        out.push_str(&format!(
            "| median | {w} | {after} | {} | {} | {} | {} | {} in all | {} in all | |\n",
            med(|r| r.reads.window_ms),
            med(|r| r.new_clients.window_ms),
            med(|r| r.writes_acked as f64),
            med(|r| r.writes_failed as f64),
            all(|r| r.lost),
            all(|r| r.duplicated),
        ));
    }
    out.push('\n');
    writes(out, records);
    reads(out, records);
    let notes = s.notes.trim();
    if !notes.is_empty() {
        out.push_str(notes);
        out.push_str("\n\n");
    }
    errors(out, "writers", records.iter().map(|r| &r.write_errors));
    errors(
        out,
        "connected readers",
        records.iter().map(|r| &r.reads.errors),
    );
    errors(
        out,
        "new clients",
        records.iter().map(|r| &r.new_clients.errors),
    );
}

/// The target cell of a round.
fn verdict(r: &FailoverRecord) -> String {
    let target = format!("< {} ms", int(r.settings.target_ms));
    let mut v = match r.write_window_ms {
        None => format!("{target}: not met (no write on the new primary)"),
        Some(_) if r.met() => format!("{target}: met"),
        Some(_) => format!("{target}: not met"),
    };
    if !r.consistent() {
        v.push_str("; writes lost or repeated");
    }
    v
}

/// What else each round's writes saw.
fn writes(out: &mut String, records: &[FailoverRecord]) {
    out.push_str(
        "| round | synchronous replicas | writes acknowledged after the kill | failed writes \
         committed all the same | writers' reconnects | promotion ms |\n",
    );
    out.push_str("|---:|---:|---:|---:|---:|---:|\n");
    for r in records {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.round,
            int(r.sync_replicas),
            int(r.writes_acked_after_kill),
            int(r.writes_failed_present),
            int(r.writer_reconnects),
            num(r.promote_ms, 0)
        ));
    }
    out.push('\n');
}

/// Each round's reads, connected readers and new clients.
fn reads(out: &mut String, records: &[FailoverRecord]) {
    out.push_str(
        "| round | readers | reads ok | reads failed | longest read after the kill ms | \
         reads after the promotion, by server port (*: the promoted one; its last read, ms \
         after the kill) | reconnects |\n",
    );
    out.push_str("|---:|:---|---:|---:|---:|:---|---:|\n");
    for r in records {
        for (who, x) in [("connected", &r.reads), ("new clients", &r.new_clients)] {
            out.push_str(&format!(
                "| {} | {who} | {} | {} | {} | {} | {} |\n",
                r.round,
                int(x.ok),
                int(x.failed),
                num(x.max_ms, 0),
                by_port(x, r.settings.promoted_port),
                int(x.reconnects)
            ));
        }
    }
    out.push('\n');
}

/// "27533*: 12, last at 140; 27534: 9,000".
fn by_port(x: &FailoverReads, promoted: u16) -> String {
    let mut parts = Vec::new();
    for (port, n) in &x.after_promotion {
        if *port == i64::from(promoted) {
            let last = x
                .last_new_primary_ms
                .map_or(String::new(), |l| format!(", last at {}", num(l, 0)));
            parts.push(format!("{port}*: {}{last}", int(*n)));
        } else {
            parts.push(format!("{port}: {}", int(*n)));
        }
    }
    if parts.is_empty() {
        NONE.to_string()
    } else {
        parts.join("; ")
    }
}

/// The most frequent error messages of one kind over all rounds.
fn errors<'a>(
    out: &mut String,
    who: &str,
    per_round: impl Iterator<Item = &'a BTreeMap<String, u64>>,
) {
    let mut all: BTreeMap<&str, u64> = BTreeMap::new();
    for m in per_round {
        for (k, v) in m {
            *all.entry(k.as_str()).or_default() += v;
        }
    }
    if all.is_empty() {
        return;
    }
    let mut list: Vec<(&str, u64)> = all.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    out.push_str(&format!("Errors the {who} saw (all rounds):\n\n"));
    for (msg, n) in list.iter().take(MAX_ERRORS_LISTED) {
        out.push_str(&format!(
            "- {} × {}\n",
            int(*n),
            code(&truncate(msg, MAX_ERROR_CHARS))
        ));
    }
    if list.len() > MAX_ERRORS_LISTED {
        let rest: u64 = list.iter().skip(MAX_ERRORS_LISTED).map(|(_, n)| n).sum();
        out.push_str(&format!(
            "- {} more of {}\n",
            int(rest),
            plural(
                list.len() - MAX_ERRORS_LISTED,
                "other message",
                "other messages"
            )
        ));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::FailoverSettings;

    fn record(round: u32, window: Option<f64>, lost: u64) -> FailoverRecord {
        FailoverRecord {
            round,
            settings: FailoverSettings {
                protocol: "pg".to_string(),
                writes: "sluice-rw".to_string(),
                reads: "sluice-ro".to_string(),
                writers: 8,
                readers: 4,
                kill_after_s: 3.0,
                promote_after_s: 0.0,
                run_after_s: 5.0,
                kill: "SIGKILL to the postmaster".to_string(),
                promote: "pg_promote()".to_string(),
                health_interval_ms: 500,
                health_failures: 2,
                target_ms: 2000,
                promoted_port: 5001,
                notes: String::new(),
            },
            write_window_ms: window,
            promote_ms: 210.0,
            promoted_ms: 215.0,
            sync_replicas: 1,
            writes_acked: 10_000 + u64::from(round),
            writes_acked_after_kill: 5000,
            writes_failed: 8,
            writes_failed_present: 2,
            lost,
            duplicated: 0,
            writer_reconnects: 8,
            write_errors: BTreeMap::from([
                ("db error: no primary | here".to_string(), 5),
                ("connection closed".to_string(), 3),
            ]),
            reads: FailoverReads {
                ok: 20_000,
                max_ms: 12.0,
                after_promotion: BTreeMap::from([(5001, 3), (5002, 900)]),
                last_new_primary_ms: Some(450.0),
                ..FailoverReads::default()
            },
            new_clients: FailoverReads {
                ok: 70,
                failed: 10,
                window_ms: 1000.0 + f64::from(round),
                max_ms: 40.0,
                errors: BTreeMap::from([("no replica".to_string(), 10)]),
                ..FailoverReads::default()
            },
        }
    }

    #[test]
    fn rounds_medians_targets_and_errors() {
        let recs = vec![
            record(1, Some(1200.0), 0),
            record(2, Some(2500.0), 0),
            record(3, None, 1),
        ];
        let mut out = String::new();
        render(&mut out, &recs);
        assert!(out.starts_with("### Failover: SIGKILL to the postmaster, then pg_promote()\n"));
        assert!(out.contains("under 2,000 ms"), "{out}");
        assert!(
            out.contains("| 1 | 1,200 | 985 | 0 | 1,001 | 10,001 | 8 | 0 | 0 | < 2,000 ms: met |")
        );
        assert!(out.contains(
            "| 2 | 2,500 | 2,285 | 0 | 1,002 | 10,002 | 8 | 0 | 0 | < 2,000 ms: not met |"
        ));
        assert!(out.contains(
            "| 3 | — | — | 0 | 1,003 | 10,003 | 8 | 1 | 0 | < 2,000 ms: not met (no write on \
             the new primary); writes lost or repeated |"
        ));
        // A round without a window leaves the median out.
        assert!(
            out.contains("| median | — | — | 0 | 1,002 | 10,002 | 8 | 1 in all | 0 in all | |")
        );
        assert!(out.contains("| 1 | 1 | 5,000 | 2 | 8 | 210 |"));
        assert!(out.contains(
            "| 1 | connected | 20,000 | 0 | 12 | 5001*: 3, last at 450; 5002: 900 | 0 |"
        ));
        assert!(out.contains("| 1 | new clients | 70 | 10 | 40 | — | 0 |"));
        assert!(out.contains("Errors the writers saw (all rounds):\n\n- 15 × `db error: no primary | here`\n- 9 × `connection closed`\n"));
        assert!(out.contains("Errors the new clients saw (all rounds):\n\n- 30 × `no replica`\n"));
        assert!(!out.contains("Errors the connected readers saw"));
    }

    #[test]
    fn one_round_has_no_median_and_none_renders_nothing() {
        let mut out = String::new();
        render(&mut out, &[record(1, Some(900.0), 0)]);
        assert!(!out.contains("| median |"));
        let mut empty = String::new();
        render(&mut empty, &[]);
        assert!(empty.is_empty());
    }
}
