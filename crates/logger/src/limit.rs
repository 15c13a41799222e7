//! Rate limiting per message key, so that a client repeating a failing
//! request cannot flood the log: each key has a token bucket (a burst,
//! then a steady trickle), and what it drops is counted and said with the
//! next message of that key that passes, or at shutdown.
//!
//! A key is the call site plus the message with its digits taken out:
//! "open on node 12: EACCES" and "open on node 13: EACCES" share one
//! bucket, "open on node 12: EIO" has its own.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// Messages a key may log at once.
pub const BURST: f64 = 10.0;
/// Then one per this long.
pub const EVERY: Duration = Duration::from_secs(6);
/// Keys remembered; past it, idle keys are forgotten, and if none is
/// idle, new keys share one bucket.
const MAX_KEYS: usize = 1024;
/// Characters of a message kept as the sample a summary quotes.
const SAMPLE: usize = 80;
/// Characters of a message (digits out) that make its key.
const KEY_CHARS: usize = 48;

struct Bucket {
    tokens: f64,
    at: Instant,
    suppressed: u64,
    sample: String,
}

/// What to do with a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Log it; `suppressed` messages of its key were dropped before it.
    Pass { suppressed: u64 },
    /// Drop it (counted).
    Drop,
}

/// Token buckets by key.
#[derive(Default)]
pub struct Limiter {
    buckets: HashMap<u64, Bucket>,
}

/// The key of message `msg` logged at `site`.
pub fn key(site: &str, line: u32, msg: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    site.hash(&mut h);
    line.hash(&mut h);
    for c in msg.chars().filter(|c| !c.is_ascii_digit()).take(KEY_CHARS) {
        c.hash(&mut h);
    }
    h.finish()
}

impl Limiter {
    /// Whether a message of `key` may be logged at `now`.
    pub fn admit(&mut self, key: u64, msg: &str, now: Instant) -> Verdict {
        let key = if self.buckets.contains_key(&key) || self.make_room(now) {
            key
        } else {
            0
        };
        let b = self.buckets.entry(key).or_insert_with(|| Bucket {
            tokens: BURST,
            at: now,
            suppressed: 0,
            sample: msg.chars().take(SAMPLE).collect(),
        });
        let earned = now.saturating_duration_since(b.at).as_secs_f64() / EVERY.as_secs_f64();
        b.tokens = (b.tokens + earned).min(BURST);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Verdict::Pass {
                suppressed: std::mem::take(&mut b.suppressed),
            }
        } else {
            b.suppressed += 1;
            Verdict::Drop
        }
    }

    /// Room for one more key: true if there is (after forgetting keys
    /// whose buckets have refilled and owe no summary).
    fn make_room(&mut self, now: Instant) -> bool {
        if self.buckets.len() < MAX_KEYS {
            return true;
        }
        let full = EVERY.mul_f64(BURST);
        self.buckets
            .retain(|_, b| b.suppressed > 0 || now.saturating_duration_since(b.at) < full);
        self.buckets.len() < MAX_KEYS
    }

    /// The drops not yet said, as (count, sample message), and forgets
    /// them.
    pub fn take_suppressed(&mut self) -> Vec<(u64, String)> {
        self.buckets
            .values_mut()
            .filter(|b| b.suppressed > 0)
            .map(|b| (std::mem::take(&mut b.suppressed), b.sample.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_one_per_period_and_drops_are_counted() {
        let mut l = Limiter::default();
        let t0 = Instant::now();
        let k = key("f.rs", 1, "open on node 5: EACCES");
        for _ in 0..BURST as usize {
            assert_eq!(l.admit(k, "m", t0), Verdict::Pass { suppressed: 0 });
        }
        for _ in 0..1000 {
            assert_eq!(l.admit(k, "m", t0), Verdict::Drop);
        }
        // Not yet a whole token.
        assert_eq!(l.admit(k, "m", t0 + EVERY / 2), Verdict::Drop);
        assert_eq!(
            l.admit(k, "m", t0 + EVERY),
            Verdict::Pass { suppressed: 1001 }
        );
        assert_eq!(l.admit(k, "m", t0 + EVERY), Verdict::Drop);
        assert_eq!(l.take_suppressed(), vec![(1, "m".to_string())]);
        assert!(l.take_suppressed().is_empty());
    }

    #[test]
    fn keys_ignore_digits_but_not_words() {
        let a = key("f.rs", 1, "open on node 12: EACCES");
        assert_eq!(a, key("f.rs", 1, "open on node 9999: EACCES"));
        assert_ne!(a, key("f.rs", 1, "open on node 12: EIO"));
        assert_ne!(a, key("f.rs", 2, "open on node 12: EACCES"));
        // A flood of one key leaves another key's burst whole.
        let mut l = Limiter::default();
        let t = Instant::now();
        for _ in 0..100 {
            l.admit(a, "a", t);
        }
        let b = key("f.rs", 1, "open on node 12: EIO");
        assert_eq!(l.admit(b, "b", t), Verdict::Pass { suppressed: 0 });
    }

    #[test]
    fn endless_distinct_keys_stay_bounded() {
        let mut l = Limiter::default();
        let t = Instant::now();
        let mut passed = 0;
        for i in 0..100_000u64 {
            if let Verdict::Pass { .. } = l.admit(i + 1, "x", t) {
                passed += 1;
            }
        }
        assert!(l.buckets.len() <= MAX_KEYS + 1, "{}", l.buckets.len());
        // The overflow bucket lets its own burst through and no more.
        assert_eq!(passed, MAX_KEYS + BURST as usize);
    }
}
