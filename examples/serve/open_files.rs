//! Fitting `Config::max_connections` to the process's open-file limit (`ulimit -n`) at
//! start-up: a limit below it makes accepting fail with EMFILE while the connection limit is
//! not reached yet, and the connection limit is what keeps a flood of connections in bounds.

use std::io;

use libc::rlim_t;

use crate::refusal::MAX_REFUSING;

/// Descriptors the process needs besides its connections: the refusals in progress, a
/// connection accepted over the limit to be closed, and a margin for the rest (the standard
/// streams, the listener, the runtime's and the device's own).
const OTHER_DESCRIPTORS: rlim_t = MAX_REFUSING as rlim_t + 1 + 64;

/// What to do about the open-file limit for a connection limit.
#[derive(Debug, PartialEq)]
pub(crate) struct Fit {
    /// The soft limit to raise to, if it is too low.
    pub(crate) raise_soft_to: Option<rlim_t>,
    /// The connection limit to serve with: the configured one, or what the hard limit leaves
    /// room for (at least one connection).
    pub(crate) max_connections: usize,
}

/// Fits `max_connections` to the `soft` and `hard` open-file limits: the soft limit is raised
/// toward the hard one as far as the connections and [`OTHER_DESCRIPTORS`] need, and the
/// connection limit lowered only when the hard limit cannot cover it.
pub(crate) fn fit(max_connections: usize, soft: rlim_t, hard: rlim_t) -> Fit {
    let needed = (max_connections as rlim_t).saturating_add(OTHER_DESCRIPTORS);
    if soft >= needed {
        return Fit {
            raise_soft_to: None,
            max_connections,
        };
    }
    let reachable = needed.min(hard.max(soft));
    let room = reachable.saturating_sub(OTHER_DESCRIPTORS);
    Fit {
        raise_soft_to: (reachable > soft).then_some(reachable),
        max_connections: usize::try_from(room)
            .unwrap_or(usize::MAX)
            .clamp(max_connections.min(1), max_connections),
    }
}

/// Reads the process's open-file limit, raises its soft limit if `max_connections` needs it
/// and the hard limit allows, logs what it did, and returns the connection limit to serve with.
pub(crate) fn fit_max_connections(max_connections: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes the limit into `limit`, a valid `rlimit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let err = io::Error::last_os_error();
        tracing::warn!(error = %err, max_connections, "the open-file limit could not be read");
        return max_connections;
    }
    let (soft, hard) = (limit.rlim_cur, limit.rlim_max);
    let mut fitted = fit(max_connections, soft, hard);
    // The soft limit the process runs with from here on, which is what bounds its descriptors.
    let mut in_force = soft;
    if let Some(raised) = fitted.raise_soft_to {
        let limit = libc::rlimit {
            rlim_cur: raised,
            rlim_max: hard,
        };
        // SAFETY: setrlimit(2) reads `limit`, a valid `rlimit`.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
            in_force = raised;
            tracing::info!(
                from = soft,
                to = raised,
                "raised the open-file limit for max_connections"
            );
        } else {
            let err = io::Error::last_os_error();
            tracing::warn!(error = %err, soft, "the open-file limit could not be raised");
            fitted = fit(max_connections, soft, soft);
        }
    }
    if fitted.max_connections < max_connections {
        tracing::warn!(
            configured = max_connections,
            effective = fitted.max_connections,
            open_file_limit = in_force,
            "max_connections lowered to what the open-file limit (ulimit -n) leaves room for"
        );
    }
    fitted.max_connections
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connections' descriptors plus the others: the soft limit a connection limit needs.
    const fn needed(max_connections: rlim_t) -> rlim_t {
        max_connections + OTHER_DESCRIPTORS
    }

    #[test]
    fn a_soft_limit_that_covers_the_connections_is_left_alone() {
        for soft in [needed(512), 1024, libc::RLIM_INFINITY] {
            let kept = Fit {
                raise_soft_to: None,
                max_connections: 512,
            };
            assert_eq!(fit(512, soft, libc::RLIM_INFINITY), kept, "soft {soft}");
        }
    }

    #[test]
    fn a_low_soft_limit_is_raised_as_far_as_the_connections_need() {
        for hard in [needed(512), 4096, libc::RLIM_INFINITY] {
            let raised = Fit {
                raise_soft_to: Some(needed(512)),
                max_connections: 512,
            };
            assert_eq!(fit(512, 256, hard), raised, "hard {hard}");
        }
    }

    #[test]
    fn a_hard_limit_below_the_need_lowers_the_connections_to_its_room() {
        // Raised to the hard limit, and the connections fitted under it.
        let lowered = Fit {
            raise_soft_to: Some(needed(300)),
            max_connections: 300,
        };
        assert_eq!(fit(512, 256, needed(300)), lowered);
        // Already at the hard limit: only the connections move.
        let lowered = Fit {
            raise_soft_to: None,
            max_connections: 100,
        };
        assert_eq!(fit(512, needed(100), needed(100)), lowered);
    }

    #[test]
    fn a_limit_with_no_room_for_connections_still_serves_one() {
        let one = Fit {
            raise_soft_to: None,
            max_connections: 1,
        };
        assert_eq!(fit(512, 20, 20), one);
    }
}
