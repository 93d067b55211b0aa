//! Argon2's working memory (19 MiB with the default parameters), mapped
//! from the kernel for the verifier threads and given back as soon as
//! their queue is empty.
//!
//! Not from the allocator: glibc raises its mmap threshold to the size of
//! the first large block freed, serves every later one from the thread's
//! arena, and keeps what is freed there. Measured with 300 wrong passwords
//! against two verifier threads, Argon2's own allocations left the process
//! 190 MiB larger, for good; mapped, the process grows by what the threads
//! use while they work (threads × 19 MiB) and shrinks back after.

use std::ptr::NonNull;

use argon2::Block;

/// One thread's working memory; empty until a verification needs it.
#[derive(Default)]
pub(crate) struct Scratch {
    map: Option<Mapped>,
}

impl Scratch {
    /// At least `count` blocks, zeroed when new; `None` when the kernel has
    /// no memory to give.
    pub(crate) fn blocks(&mut self, count: usize) -> Option<&mut [Block]> {
        if self.map.as_ref().is_some_and(|m| m.count < count) {
            self.map = None;
        }
        if self.map.is_none() {
            self.map = Mapped::new(count);
        }
        self.map.as_mut().map(Mapped::blocks)
    }

    /// Gives the memory back.
    pub(crate) fn release(&mut self) {
        self.map = None;
    }

    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.count)
    }
}

/// An anonymous private mapping of `count` blocks.
struct Mapped {
    ptr: NonNull<Block>,
    count: usize,
}

// SAFETY: the mapping is owned by one `Mapped` and only reached through
// `&mut self`, so moving it to another thread moves sole access with it.
#[allow(unsafe_code)]
unsafe impl Send for Mapped {}

// An anonymous mapping, which std cannot make: mmap, munmap and the
// slice over it (each call's SAFETY comment says why it holds).
#[allow(unsafe_code)]
impl Mapped {
    fn new(count: usize) -> Option<Mapped> {
        let len = count.checked_mul(size_of::<Block>())?;
        if len == 0 {
            return None;
        }
        // SAFETY: a fresh anonymous mapping (no address hint, no file); the
        // result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some(Mapped {
            ptr: NonNull::new(ptr.cast())?,
            count,
        })
    }

    fn blocks(&mut self) -> &mut [Block] {
        // SAFETY: the mapping is `count` blocks long, page-aligned (more
        // than a block's 64-byte alignment), zero-filled by the kernel (all
        // zeros is a valid block: it is 128 integers) and lives as long as
        // `self`, which the borrow ties the slice to.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.count) }
    }
}

#[allow(unsafe_code)]
impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping `new` made, unmapped once; no slice
        // into it outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.count * size_of::<Block>());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_mapped_on_demand_grown_and_given_back() {
        let mut s = Scratch::default();
        assert_eq!(s.held(), 0);
        let blocks = s.blocks(16).unwrap();
        assert_eq!(blocks.len(), 16);
        blocks[15] = Block::default();
        assert_eq!(s.blocks(8).unwrap().len(), 16, "kept when large enough");
        assert_eq!(s.blocks(32).unwrap().len(), 32);
        s.release();
        assert_eq!(s.held(), 0);
    }
}
