//! [`Epoch`]: a counter that threads wait on until it moves, woken all at
//! once. Group commit releases every appender a sync covered through one;
//! on Linux it is a futex, so the woken threads run on without taking any
//! lock (the waiters of a condition variable each re-take its mutex on
//! waking, one after another, which on two cores costs a context switch
//! per waiter).

use std::sync::atomic::{AtomicU32, Ordering};

/// A counter to wait on; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct Epoch {
    n: AtomicU32,
    /// Threads inside [`Epoch::wait_past`]: [`Epoch::advance`] makes no
    /// system call when there are none.
    waiters: AtomicU32,
    #[cfg(not(target_os = "linux"))]
    mx: std::sync::Mutex<()>,
    #[cfg(not(target_os = "linux"))]
    cv: std::sync::Condvar,
}

impl Epoch {
    /// The value now: pass it to [`Epoch::wait_past`].
    pub(crate) fn current(&self) -> u32 {
        self.n.load(Ordering::SeqCst)
    }

    /// Moves the counter on and wakes every thread waiting on it.
    pub(crate) fn advance(&self) {
        #[cfg(not(target_os = "linux"))]
        let _g = self.mx.lock().unwrap_or_else(|e| e.into_inner());
        self.n.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        #[cfg(target_os = "linux")]
        // SAFETY: FUTEX_WAKE on a live, aligned u32; it reads nothing else.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.n.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            );
        }
        #[cfg(not(target_os = "linux"))]
        self.cv.notify_all();
    }

    /// Returns once the counter no longer holds `seen`.
    pub(crate) fn wait_past(&self, seen: u32) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        #[cfg(target_os = "linux")]
        while self.n.load(Ordering::SeqCst) == seen {
            // SAFETY: FUTEX_WAIT on a live, aligned u32 with no timeout; the
            // kernel returns at once if it no longer holds `seen`, so a
            // wake between the check and the call is not lost.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.n.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    seen,
                    std::ptr::null::<libc::timespec>(),
                );
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut g = self.mx.lock().unwrap_or_else(|e| e.into_inner());
            while self.n.load(Ordering::SeqCst) == seen {
                g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn waiters_return_once_it_moves_and_not_before() {
        let e = Arc::new(Epoch::default());
        let seen = e.current();
        let done = Arc::new(AtomicU32::new(0));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (e, done) = (e.clone(), done.clone());
                std::thread::spawn(move || {
                    e.wait_past(seen);
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            done.load(Ordering::SeqCst),
            0,
            "nobody returns before it moves"
        );
        e.advance();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 8);
        // A stale value returns at once.
        e.wait_past(seen);
    }
}
