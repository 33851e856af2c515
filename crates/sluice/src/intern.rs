//! Values many clients hold alike, kept once: a client interns its copy and holds the
//! shared one (copy-on-write if it ever changes it). Entries are weak, so a value no
//! client holds any more goes away; dead entries are swept when the table grows.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Weak};

pub struct Interner<T: ?Sized> {
    map: Mutex<Table<T>>,
    hasher: std::collections::hash_map::RandomState,
}

/// The entries by hash, and the size at which dead ones are swept next.
struct Table<T: ?Sized> {
    by_hash: HashMap<u64, Vec<Weak<T>>>,
    sweep_at: usize,
}

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            map: Mutex::new(Table {
                by_hash: HashMap::new(),
                sweep_at: SWEEP_AT,
            }),
            hasher: Default::default(),
        }
    }
}

/// Sweep dead entries when the table holds this many hashes, or twice as many as were
/// alive at the last sweep (so that many live values do not make every new one sweep).
const SWEEP_AT: usize = 1024;

impl<T: Hash + Eq> Interner<T> {
    /// The shared value equal to `v` (which becomes the shared one if there is none).
    pub fn intern(&self, v: T) -> Arc<T> {
        self.intern_with(v, Arc::new)
    }
}

impl Interner<str> {
    /// The shared string equal to `s` (a client's user, database or listener name: ten
    /// thousand clients of one user hold one copy).
    pub fn name(&self, s: &str) -> Arc<str> {
        self.intern_with(s, Arc::from)
    }
}

impl<T: Hash + Eq + ?Sized> Interner<T> {
    /// The shared value equal to `v`, made by `make` if there is none.
    fn intern_with<V: std::borrow::Borrow<T>>(
        &self,
        v: V,
        make: impl FnOnce(V) -> Arc<T>,
    ) -> Arc<T> {
        let h = self.hasher.hash_one(v.borrow());
        let mut table = self.map.lock();
        if let Some(found) = table.by_hash.get(&h).and_then(|bucket| {
            bucket
                .iter()
                .filter_map(Weak::upgrade)
                .find(|x| **x == *v.borrow())
        }) {
            return found;
        }
        if table.by_hash.len() >= table.sweep_at {
            table.by_hash.retain(|_, bucket| {
                bucket.retain(|w| w.strong_count() > 0);
                !bucket.is_empty()
            });
            table.sweep_at = SWEEP_AT.max(2 * table.by_hash.len());
        }
        let arc = make(v);
        let bucket = table.by_hash.entry(h).or_default();
        bucket.retain(|w| w.strong_count() > 0);
        bucket.push(Arc::downgrade(&arc));
        arc
    }

    /// Hashes held (live or not yet swept).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().by_hash.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_allocation() {
        let i = Interner::default();
        let a = i.intern(vec![1, 2, 3]);
        let b = i.intern(vec![1, 2, 3]);
        let c = i.intern(vec![4]);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(*c, vec![4]);
    }

    #[test]
    fn equal_names_share_one_allocation() {
        let i = Interner::<str>::default();
        let a = i.name("alice");
        assert!(Arc::ptr_eq(&a, &i.name(&String::from("alice"))));
        assert_eq!(&*i.name("bob"), "bob");
    }

    #[test]
    fn unheld_values_go_away() {
        let i = Interner::default();
        for n in 0..3 * SWEEP_AT {
            drop(i.intern(n));
        }
        assert!(i.len() <= SWEEP_AT + 1, "{}", i.len());
        let kept = i.intern(7usize);
        assert!(Arc::ptr_eq(&kept, &i.intern(7usize)));
    }

    #[test]
    fn many_live_values_are_not_swept_at_every_new_one() {
        let i = Interner::default();
        let live: Vec<_> = (0..2 * SWEEP_AT).map(|n| i.intern(n)).collect();
        // The last sweep found them all alive: the next waits for twice as many.
        assert!(
            i.map.lock().sweep_at >= 2 * SWEEP_AT,
            "{}",
            i.map.lock().sweep_at
        );
        drop(live);
        for n in 0..8 * SWEEP_AT {
            drop(i.intern(n + 10 * SWEEP_AT));
        }
        assert!(i.len() <= 4 * SWEEP_AT + 1, "{}", i.len());
    }
}
