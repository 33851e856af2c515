//! A failover round's numbers from what the writers ([`Numbers`]) and readers
//! ([`ReadNumbers`]) saw, and the new primary's rows against what the writers were told
//! ([`Check`]).

use super::{ErrorCounts, ReaderLog, WriterLog};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// When the failover happened, and where to.
#[derive(Debug, Clone, Copy)]
pub struct Moments {
    /// Just before the kill.
    pub kill: Instant,
    /// When the promotion had finished.
    pub promoted: Instant,
    /// The promoted server's port.
    pub new_port: i64,
}

/// What reads saw (times in milliseconds from the kill).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReadNumbers {
    pub ok: u64,
    pub failed: u64,
    /// From the start of the first failed read to the end of the last.
    pub window_ms: f64,
    /// The longest successful read that ended after the kill.
    pub max_ms: f64,
    /// Reads sent after the promotion and answered by the promoted server (a primary
    /// now) on the read-only route, and when the last of them ended.
    pub new_primary: u64,
    pub last_new_primary_ms: Option<f64>,
    /// Reads sent after the promotion, by the port of the server that answered.
    pub after_promotion: BTreeMap<i64, u64>,
    pub reconnects: u64,
    pub errors: ErrorCounts,
}

impl ReadNumbers {
    pub fn of(readers: &[ReaderLog], at: Moments) -> ReadNumbers {
        let kill = at.kill;
        let mut n = ReadNumbers::default();
        let mut failed_span: Option<(Instant, Instant)> = None;
        let mut longest = Duration::ZERO;
        let mut last_new: Option<Instant> = None;
        for r in readers {
            n.reconnects += r.reconnects;
            merge_errors(&mut n.errors, &r.errors);
            for x in &r.reads {
                let Some(port) = x.port else {
                    n.failed += 1;
                    failed_span = Some(match failed_span {
                        None => (x.sent, x.done),
                        Some((a, b)) => (a.min(x.sent), b.max(x.done)),
                    });
                    continue;
                };
                n.ok += 1;
                if x.done >= kill {
                    longest = longest.max(x.done - x.sent);
                }
                if x.sent >= at.promoted {
                    *n.after_promotion.entry(port).or_default() += 1;
                    if port == at.new_port {
                        n.new_primary += 1;
                        last_new = Some(last_new.map_or(x.done, |l| l.max(x.done)));
                    }
                }
            }
        }
        n.window_ms = failed_span.map_or(0.0, |(a, b)| ms(b - a));
        n.max_ms = ms(longest);
        n.last_new_primary_ms = last_new.map(|l| ms(l.saturating_duration_since(kill)));
        n
    }
}

/// The round's writes (times in milliseconds from the kill).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Numbers {
    /// To the first write the new primary acknowledged; None: none did.
    pub write_window_ms: Option<f64>,
    pub writes_acked: u64,
    pub writes_acked_after_kill: u64,
    pub writes_failed: u64,
    pub reconnects: u64,
    pub write_errors: ErrorCounts,
}

impl Numbers {
    pub fn of(writers: &[WriterLog], at: Moments) -> Numbers {
        let kill = at.kill;
        let mut n = Numbers::default();
        let mut first_new: Option<Instant> = None;
        for w in writers {
            n.writes_acked += w.acked.len() as u64;
            n.writes_failed += w.failed.len() as u64;
            n.reconnects += w.reconnects;
            for a in w.acked.iter().filter(|a| a.at >= kill) {
                n.writes_acked_after_kill += 1;
                if a.port == at.new_port && first_new.is_none_or(|f| a.at < f) {
                    first_new = Some(a.at);
                }
            }
            merge_errors(&mut n.write_errors, &w.errors);
        }
        n.write_window_ms = first_new.map(|f| ms(f - kill));
        n
    }
}

fn merge_errors(into: &mut ErrorCounts, from: &ErrorCounts) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// What the new primary holds against what the writers were told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Check {
    /// Acknowledged rows that are not there.
    pub lost: u64,
    /// Rows there more than once.
    pub duplicated: u64,
    /// Failed rows that are there (committed, the acknowledgement lost).
    pub failed_present: u64,
}

impl Check {
    /// `rows`: how often each (client, seq) is on the new primary.
    pub fn of(writers: &[WriterLog], rows: &HashMap<(i32, i32), i64>) -> Check {
        let mut c = Check {
            duplicated: rows.values().filter(|&&n| n > 1).count() as u64,
            ..Check::default()
        };
        for w in writers {
            c.lost += w
                .acked
                .iter()
                .filter(|a| !rows.contains_key(&(w.client, a.seq)))
                .count() as u64;
            c.failed_present += w
                .failed
                .iter()
                .filter(|s| rows.contains_key(&(w.client, **s)))
                .count() as u64;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Ack, Read};
    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn windows_count_from_the_kill() {
        let t = Instant::now();
        let moments = Moments {
            kill: at(t, 1000),
            promoted: at(t, 1200),
            new_port: 5001,
        };
        let ack = |seq, ms, port| Ack {
            seq,
            at: at(t, ms),
            port,
        };
        let w = WriterLog {
            client: 1,
            // The old primary answered once after the kill; the new one from 2,300 ms.
            acked: vec![
                ack(1, 500, 5000),
                ack(2, 1010, 5000),
                ack(4, 2400, 5001),
                ack(5, 2300, 5001),
            ],
            failed: vec![3],
            errors: ErrorCounts::from([("gone".to_string(), 1)]),
            reconnects: 1,
        };
        let read = |s, d, port| Read {
            sent: at(t, s),
            done: at(t, d),
            port,
        };
        let r = ReaderLog {
            reads: vec![
                // r1 before the promotion: a replica then.
                read(0, 1, Some(5001)),
                read(1100, 1150, None),
                read(1160, 1400, Some(5002)),
                read(1500, 1520, None),
                // r1 after the promotion: the primary on the read-only route.
                read(1600, 1610, Some(5001)),
                read(1700, 1705, Some(5001)),
            ],
            errors: ErrorCounts::from([("gone".to_string(), 2)]),
            reconnects: 0,
        };
        let n = Numbers::of(&[w], moments);
        assert_eq!(n.write_window_ms, Some(1300.0));
        assert_eq!(n.writes_acked, 4);
        assert_eq!(n.writes_acked_after_kill, 3);
        assert_eq!(n.writes_failed, 1);
        assert_eq!(n.reconnects, 1);
        assert_eq!(n.write_errors.get("gone"), Some(&1));
        let r = ReadNumbers::of(&[r], moments);
        assert_eq!(r.window_ms, 420.0);
        assert_eq!((r.ok, r.failed), (4, 2));
        assert_eq!(r.max_ms, 240.0);
        assert_eq!(r.new_primary, 2);
        assert_eq!(r.after_promotion, BTreeMap::from([(5001, 2)]));
        assert_eq!(r.last_new_primary_ms, Some(705.0));
        assert_eq!(r.errors.get("gone"), Some(&2));
        // Nothing from the new primary: no window; no failed read: 0.
        assert_eq!(Numbers::of(&[], moments).write_window_ms, None);
        let quiet = ReadNumbers::of(&[ReaderLog::default()], moments);
        assert_eq!(quiet.window_ms, 0.0);
        assert_eq!(quiet.last_new_primary_ms, None);
    }

    #[test]
    fn lost_duplicated_and_failed_present() {
        let t = Instant::now();
        let ack = |seq| Ack {
            seq,
            at: t,
            port: 1,
        };
        let w1 = WriterLog {
            client: 1,
            acked: vec![ack(1), ack(2), ack(4)],
            failed: vec![3, 5],
            ..WriterLog::default()
        };
        let w2 = WriterLog {
            client: 2,
            acked: vec![ack(1)],
            ..WriterLog::default()
        };
        let rows = HashMap::from([((1, 1), 1), ((1, 2), 2), ((1, 3), 1), ((2, 1), 1)]);
        let c = Check::of(&[w1, w2], &rows);
        assert_eq!(
            c,
            Check {
                lost: 1,
                duplicated: 1,
                failed_present: 1
            }
        );
    }
}
