//! A bounded cache of authorization answers: each kept for one lifetime, at most a set number at once, oldest out first; every operation is amortized O(1), so a flood of distinct bogus tokens costs neither memory without bound nor a sweep under the lock.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Answers by key, each for `ttl`, at most `capacity` of them.
pub struct AnswerCache<K, V> {
    ttl: Duration,
    capacity: usize,
    answers: HashMap<K, (V, Instant, u64)>,
    /// Keys in the order they were stored, with when and their store number (a key stored
    /// again appears twice; the older entry is skipped when it comes up, its number no longer
    /// the map's).
    order: VecDeque<(K, Instant, u64)>,
    stored: u64,
}

impl<K: Clone + Eq + Hash, V: Clone> AnswerCache<K, V> {
    /// An empty cache.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity: capacity.max(1),
            answers: HashMap::new(),
            order: VecDeque::new(),
            stored: 0,
        }
    }

    /// The answer stored for `key` less than the lifetime before `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let (value, at, _) = self.answers.get(key)?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| value.clone())
    }

    /// Stores `value` for `key` at `now`, dropping what expired and, past the capacity, the
    /// oldest answers.
    pub fn insert(&mut self, key: K, value: V, now: Instant) {
        self.stored += 1;
        self.answers.insert(key.clone(), (value, now, self.stored));
        self.order.push_back((key, now, self.stored));
        while let Some((oldest, at, number)) = self.order.front() {
            let expired = now.saturating_duration_since(*at) >= self.ttl;
            let over = self.answers.len() > self.capacity || self.order.len() > 2 * self.capacity;
            if !expired && !over {
                break;
            }
            if self
                .answers
                .get(oldest)
                .is_some_and(|(_, _, n)| n == number)
            {
                self.answers.remove(oldest);
            }
            self.order.pop_front();
        }
    }

    /// How many answers are kept.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_last_their_lifetime_and_the_cache_its_capacity() {
        let start = Instant::now();
        let mut cache = AnswerCache::new(Duration::from_secs(10), 3);
        cache.insert("a", 1, start);
        assert_eq!(cache.get(&"a", start + Duration::from_secs(9)), Some(1));
        assert_eq!(cache.get(&"a", start + Duration::from_secs(10)), None);
        for (i, key) in ["b", "c", "d"].into_iter().enumerate() {
            cache.insert(key, i, start + Duration::from_millis(i as u64));
        }
        assert_eq!(cache.len(), 3, "the oldest went");
        assert_eq!(cache.get(&"a", start), None);
        cache.insert("e", 9, start + Duration::from_secs(20));
        assert_eq!(cache.len(), 1, "the expired went");
    }

    #[test]
    fn a_flood_of_distinct_keys_stays_within_the_capacity() {
        let start = Instant::now();
        let mut cache = AnswerCache::new(Duration::from_secs(10), 100);
        for i in 0..100_000u32 {
            cache.insert(i, (), start);
            cache.insert(7, (), start);
        }
        assert!(cache.len() <= 100);
        assert!(cache.order.len() <= 200);
        assert_eq!(cache.get(&7, start), Some(()));
    }
}
