//! The statements Sluice has prepared on one server connection for transaction-mode
//! clients, by a hash of their text, under the server's ids; least recently used first
//! out. A client's statement runs on whatever connection it gets: it is prepared there
//! the first time, and found here after.

use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct StmtCache {
    /// Hash of the text -> (server id, last use).
    map: HashMap<u128, (u32, u64)>,
    clock: u64,
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

    /// The hashes of the statements prepared here.
    pub fn hashes(&self) -> impl Iterator<Item = u128> + '_ {
        self.map.keys().copied()
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
    }
}
