//! What lowcopy's fuzz targets check, one function per target. The libFuzzer binaries
//! (fuzz_targets/, nightly, `make fuzz`) feed them generated inputs; `replay` (stable, `make
//! fuzz-replay`, part of `make test`) feeds them the saved corpus. A failed check panics, a
//! crash is a crash: either way the input is a finding.
//!
//! - [`tracker`]: the zerocopy completion tracker against a simple model: every send that
//!   accepted bytes completes exactly once, never before its last notification, in the order
//!   its last notification came, with its byte count and flags; sends that accepted nothing
//!   never complete; coalesced, out-of-order, duplicate, bogus and wrapping id ranges.
//! - [`zcrx`]: zero-copy receive over a real loopback connection whose sends (sizes,
//!   MSG_ZEROCOPY or not, alignment, MSS, window, blocking or not) the input chooses: every
//!   byte arrives once in order, and mapped + copied == delivered, kind by kind.
//! - [`capi`]: the C ABI through liblowcopy.so with arguments the input chooses (pointers or
//!   NULL, sizes, flags, enum values, fds of every kind, handles used after errors): it never
//!   crashes, and every failure is a negative errno.

pub mod capi;
pub mod tracker;
pub mod zcrx;

pub use capi::capi;
pub use tracker::tracker;
pub use zcrx::zcrx;

/// Reads the fuzzer's bytes as numbers; past the end it reads zeros.
pub struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data, at: 0 }
    }

    pub fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        (self.u32() as u64) | ((self.u32() as u64) << 32)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.u32() as usize) % n
    }
}
