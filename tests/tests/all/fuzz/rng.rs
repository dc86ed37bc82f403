//! The deterministic generator that drives every case.

/// SplitMix64: tiny, fast, and good enough to drive a fuzzer.
pub(super) struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    pub(super) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True once in `n` times.
    pub(super) fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One of `items` (not empty).
    pub(super) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A random byte.
    pub(super) fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// A length skewed towards small values, sometimes up to `max`.
    pub(super) fn len(&mut self, max: usize) -> usize {
        match self.below(10) {
            0..=5 => self.below(8.min(max) + 1),
            6..=8 => self.below(64.min(max) + 1),
            _ => self.below(max + 1),
        }
    }
}
