//! A barrier that a panicking party breaks.

use std::sync::{Condvar, Mutex, PoisonError};

/// Rounds in lock-step for `parties` threads, like `std::sync::Barrier`, except that a party
/// that panics while holding its [`Turns::breaker`] breaks it: the others then panic too,
/// naming the break, instead of waiting for a party that will never come (which a watchdog
/// would report as a hang, without the first panic's message).
pub(crate) struct Turns {
    parties: usize,
    state: Mutex<State>,
    turned: Condvar,
}

#[derive(Default)]
struct State {
    waiting: usize,
    round: u64,
    broken: bool,
}

/// Breaks its [`Turns`] if dropped by a panic.
pub(crate) struct Breaker<'a>(&'a Turns);

impl Turns {
    pub(crate) fn new(parties: usize) -> Self {
        Turns {
            parties,
            state: Mutex::default(),
            turned: Condvar::new(),
        }
    }

    /// Held by a party for as long as it takes turns.
    pub(crate) fn breaker(&self) -> Breaker<'_> {
        Breaker(self)
    }

    /// Waits until every party has reached this turn; panics if one broke the turns.
    pub(crate) fn wait(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let round = state.round;
        state.waiting += 1;
        if state.waiting == self.parties {
            state.waiting = 0;
            state.round += 1;
            self.turned.notify_all();
        }
        while state.round == round && !state.broken {
            state = self
                .turned
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        assert!(
            !state.broken,
            "another party panicked (its message is above)"
        );
    }
}

impl Drop for Breaker<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let turns = self.0;
            let mut state = turns.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.broken = true;
            turns.turned.notify_all();
        }
    }
}
