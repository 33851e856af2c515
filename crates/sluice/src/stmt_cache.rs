//! The statements Sluice has prepared on one server connection for transaction-mode
//! clients, by a hash of their text, under the server's ids; least recently used first
//! out. A client's statement runs on whatever connection it gets: it is prepared there
//! the first time, and found here after.

use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct StmtCache {
    /// Hash of the text -> (server id, last use).
    map: HashMap<u128, (u32, u64), sluice_sql::Prehashed>,
    clock: u64,
    /// Where statements are closed by name and prepared again in one stream of
    /// commands (PostgreSQL's shared connections): the last Close queued for each,
    /// numbered, so that a prepare confirmed after a later Close was queued is not
    /// counted on.
    closes: HashMap<u128, u64, sluice_sql::Prehashed>,
}

impl StmtCache {
    /// The server's id of the statement, if prepared here (and marks it used).
    pub fn get(&mut self, hash: u128) -> Option<u32> {
        self.clock += 1;
        let clock = self.clock;
        self.map.get_mut(&hash).map(|s| {
            s.1 = clock;
            s.0
        })
    }

    /// Records a statement prepared here; returns the id it replaces (to be closed).
    pub fn insert(&mut self, hash: u128, id: u32) -> Option<u32> {
        self.clock += 1;
        self.map
            .insert(hash, (id, self.clock))
            .map(|old| old.0)
            .filter(|&old| old != id)
    }

    /// Makes room for one more within `cap`: returns the statement to close (hash and
    /// server id), if any.
    pub fn make_room(&mut self, cap: usize) -> Option<(u128, u32)> {
        if self.map.len() < cap.max(1) {
            return None;
        }
        let (&h, _) = self.map.iter().min_by_key(|(_, s)| s.1)?;
        self.map.remove(&h).map(|s| (h, s.0))
    }

    /// Forgets a statement (its prepare failed).
    pub fn remove(&mut self, hash: u128) {
        self.map.remove(&hash);
    }

    /// A Close of the statement is queued (the statement is not counted on from now
    /// on): its number, for [`StmtCache::confirm`].
    pub fn closing(&mut self, hash: u128) -> u64 {
        self.map.remove(&hash);
        self.clock += 1;
        if self.closes.len() >= 4 * self.map.len() + 64 {
            // A number forgotten only costs a prepare counted on later than it could be.
            self.closes.clear();
        }
        self.closes.insert(hash, self.clock);
        self.clock
    }

    /// The prepare queued after Close number `close` succeeded: the statement is
    /// counted on, unless another Close of it was queued since (that one runs later).
    pub fn confirm(&mut self, hash: u128, close: u64) {
        if self.closes.get(&hash) == Some(&close) {
            self.insert(hash, 0);
        }
    }

    /// The hashes of the statements prepared here, least recently used first.
    pub fn hashes(&self) -> Vec<u128> {
        let mut v: Vec<(u64, u128)> = self.map.iter().map(|(&h, s)| (s.1, h)).collect();
        v.sort_unstable();
        v.into_iter().map(|(_, h)| h).collect()
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::StmtCache;

    #[test]
    fn least_recently_used_goes_first() {
        let mut c = StmtCache::default();
        assert_eq!(c.make_room(2), None);
        c.insert(1, 10);
        c.insert(2, 20);
        assert_eq!(c.get(1), Some(10));
        assert_eq!(c.make_room(2), Some((2, 20)));
        assert_eq!(c.get(2), None);
        assert_eq!(c.insert(1, 11), Some(10));
        assert_eq!(c.insert(1, 11), None);
        c.insert(3, 30);
        c.get(1);
        assert_eq!(c.hashes(), [3, 1]);
    }

    #[test]
    fn only_a_prepare_after_the_last_close_is_counted_on() {
        let mut c = StmtCache::default();
        let first = c.closing(5);
        let second = c.closing(5);
        c.confirm(5, first);
        assert_eq!(c.get(5), None, "a later Close is still to run");
        c.confirm(5, second);
        assert_eq!(c.get(5), Some(0));
        // Closed to make room: no longer counted on, whatever confirms come late.
        c.closing(5);
        c.confirm(5, second);
        assert_eq!(c.get(5), None);
    }
}
