//! A hasher for map keys that are hashes already (a statement's 128-bit digest key) or
//! numbers Sluice hands out itself (a pool's address, a statement id): it folds the
//! key's words with a per-map random seed and one multiply, instead of running SipHash
//! over them on every statement (some 200 instructions a lookup). Not for integers a
//! client chooses: keys that differ only in their high bits share a bucket whatever
//! the seed (names and numbers from clients go through a seeded `foldhash`). The seed keeps a client that crafts
//! statements from choosing which bucket their keys share.

use std::hash::{BuildHasher, Hasher};

/// The map's [`BuildHasher`]: `HashMap<u128, V, Prehashed>`.
#[derive(Clone, Copy, Debug)]
pub struct Prehashed {
    seed: u64,
}

impl Default for Prehashed {
    fn default() -> Self {
        Prehashed {
            seed: std::collections::hash_map::RandomState::new().hash_one(0u8) | 1,
        }
    }
}

impl BuildHasher for Prehashed {
    type Hasher = Folded;

    fn build_hasher(&self) -> Folded {
        Folded(self.seed)
    }
}

/// Folds what it is given into one word.
#[derive(Debug)]
pub struct Folded(u64);

impl Hasher for Folded {
    fn write(&mut self, bytes: &[u8]) {
        // Keys other than integers: fold them in eight bytes at a time.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let h = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_spread_and_maps_work() {
        let b = Prehashed::default();
        // Keys alike in one half still land apart.
        let h: std::collections::HashSet<u64> = (0..1000u128)
            .map(|i| b.hash_one((i << 64) | 7))
            .map(|h| h >> 57)
            .collect();
        assert!(h.len() > 64, "top bits spread: {}", h.len());
        let mut m: std::collections::HashMap<u128, u32, Prehashed> = Default::default();
        for i in 0..100u128 {
            m.insert(i * 0x1_0000_0001, i as u32);
        }
        assert_eq!(m.get(&(42 * 0x1_0000_0001)), Some(&42));
        assert_eq!(m.len(), 100);
        // Tuples of a word and a number, and small ids.
        let mut t: std::collections::HashMap<(usize, u64), u32, Prehashed> = Default::default();
        for i in 0..100usize {
            t.insert((0x7f00_0000 + 64 * i, 3), i as u32);
            t.insert((0x7f00_0000 + 64 * i, 4), 1000 + i as u32);
        }
        assert_eq!(t.get(&(0x7f00_0000 + 64 * 7, 4)), Some(&1007));
        assert_eq!(t.len(), 200);
        let ids: std::collections::HashSet<u64> =
            (0..1000u32).map(|i| b.hash_one(i) >> 57).collect();
        assert!(ids.len() > 64, "ids spread: {}", ids.len());
    }
}
