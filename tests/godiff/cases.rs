//! Generated inputs: every short string over an alphabet, and seeded random longer ones.

/// A small deterministic generator (xorshift), so that a failure repeats.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A string of up to `max` pieces of `alphabet`.
    pub fn string(&mut self, alphabet: &[&str], max: usize) -> String {
        let len = self.below(max + 1);
        (0..len).map(|_| *self.pick(alphabet)).collect()
    }
}

/// Every string of at most `max` pieces of `alphabet`.
pub fn all_strings(alphabet: &[&str], max: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut last = vec![String::new()];
    for _ in 0..max {
        last = last
            .iter()
            .flat_map(|s| alphabet.iter().map(move |a| format!("{s}{a}")))
            .collect();
        out.extend(last.iter().cloned());
    }
    out
}
