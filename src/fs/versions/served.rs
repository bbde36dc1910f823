//! The ranges of a computed version the kernel was answered reads of, merged.

/// The ranges of a version the kernel was answered reads of (workers answer them in any
/// order), merged.
#[derive(Debug, Default, Clone)]
pub(super) struct Served(pub(super) Vec<(u64, u64)>);

impl Served {
    pub(super) fn upto(end: u64) -> Served {
        Served(if end > 0 { vec![(0, end)] } else { Vec::new() })
    }

    pub(super) fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        self.0.push((start, end));
        self.0.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.0.len());
        for &(s, e) in &self.0 {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.0 = merged;
    }

    /// How far from the start every byte was served.
    pub(super) fn contiguous(&self) -> u64 {
        match self.0.first() {
            Some(&(0, e)) => e,
            _ => 0,
        }
    }

    /// Pages from `from` on were dropped.
    pub(super) fn cut(&mut self, from: u64) {
        self.0.retain(|r| r.0 < from);
        if let Some(last) = self.0.last_mut() {
            last.1 = last.1.min(from);
        }
    }
}
