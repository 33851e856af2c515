//! The login-storm section of the Markdown report.

use super::text::{NONE, cell, int, num};
use crate::results::StormRecord;

/// The login-storm section: one line per target, its median storm.
pub(super) fn render(out: &mut String, records: &[StormRecord]) {
    out.push_str("### Login storm\n\n");
    out.push_str(
        "Every client connects at the same moment and logs in; a storm lasts until the last \
         one is logged in. Per target the median storm of its rounds (by time), with the \
         time of every round; login p50/p99 are the logged-in clients' own times from \
         connect to logged in; failed is the most of any round (with the first error); \
         CPU is the target process's over the storm. The load generator is one thread \
         on the same machine: its own side of each login is part of the time.\n\n",
    );
    out.push_str(
        "| target | clients | all logged in, s | failed (worst round) | login p50 ms | login p99 ms | \
         CPU s | every round, s |\n",
    );
    out.push_str("|:---|---:|---:|---:|---:|---:|---:|:---|\n");
    for r in records {
        let mut what = format!("{} ({}", r.target, super::text::protocol_name(&r.protocol));
        what.push_str(if r.tls { ", TLS)" } else { ")" });
        let Some(m) = r.median() else {
            out.push_str(&format!(
                "| {} | {} | {NONE} | | | | | |\n",
                cell(&what),
                int(r.clients as u64)
            ));
            continue;
        };
        let rounds: Vec<String> = r.rounds.iter().map(|x| num(x.seconds, 2)).collect();
        let failed = r.rounds.iter().map(|x| x.failed).max().unwrap_or(0);
        let mut failed_cell = int(failed as u64);
        if let Some(e) = r.rounds.iter().find(|x| !x.first_error.is_empty()) {
            failed_cell.push_str(&format!(" ({})", cell(&e.first_error)));
        }
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            cell(&what),
            int(r.clients as u64),
            num(m.seconds, 2),
            failed_cell,
            num(m.login_p50_ms, 1),
            num(m.login_p99_ms, 1),
            num(m.cpu_seconds, 2),
            rounds.join(", ")
        ));
    }
    out.push('\n');
}
