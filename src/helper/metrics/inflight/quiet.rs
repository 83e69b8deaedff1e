//! Leaving the kernel's walk of its established-socket table out of a look at the port
//! while the network namespace is quiet: the rule that says when the last full dump's
//! figures still stand, pure.
//!
//! Why: the sock_diag dump of the port costs the kernel a walk of its whole established
//! hash (262,144 buckets on a 24 GiB host, shared by every namespace), 0.2 to 2 ms a
//! sample whatever the port holds; it is most of what sampling costs. When nothing has
//! moved, a look can do without it.
//!
//! When nothing has moved. Everything the in-flight count and the drain's arrivals read
//! of a connection changes only with a TCP segment received or sent in its namespace
//! (`Tcp: InSegs`, `OutSegs`): a new connection (its handshake), bytes in (unread
//! bytes, `bytes_received`, the last-receive clock), bytes out (`bytes_sent`, the
//! last-send clock), a close by either side (a FIN or a reset). The clocks are "so long
//! ago", so their order holds while nothing moves. What the app does without a segment
//! is `listen()`, `close()` of a listener, and `accept()`, which the look sees in a dump
//! of the listeners alone (the kernel walks its small listening hash only): the same
//! listeners with the same queues. So a look whose segment counts and listeners match
//! those of the last full dump gets that dump's figures.
//!
//! Two exceptions keep the full dump: a queue that is not empty (the wait of its oldest
//! connection grows without a segment), and a drain (the hold reads every look; it runs
//! for seconds). Left as it is: a connection the kernel gives up on after its
//! retransmissions fail (a dead peer) leaves the count at the next segment in the
//! namespace, not at once.
#![forbid(unsafe_code)]

use netlink_packet_sock_diag::constants::TCP_LISTEN;

use crate::sock_diag::count::{InFlight, SockRecord};

/// The namespace's TCP segments received and sent.
pub(super) type Segments = (u64, u64);

/// What a full dump found, with the segment counts read just before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Baseline {
    segments: Segments,
    /// Each listener's cookie and backlog, sorted (their queues were empty).
    listeners: Vec<(u64, u32)>,
    found: InFlight,
}

/// The listeners of `records`, as a look compares them: None when one has a connection
/// waiting.
fn listeners(records: &[SockRecord]) -> Option<Vec<(u64, u32)>> {
    let mut keys = Vec::new();
    for record in records.iter().filter(|r| r.state == TCP_LISTEN) {
        if record.rqueue > 0 {
            return None;
        }
        // In order as they come: a port has a listener or two (a few with SO_REUSEPORT),
        // too few for a sort's code in the binary.
        let key = (record.cookie, record.wqueue);
        keys.insert(keys.partition_point(|k| *k < key), key);
    }
    Some(keys)
}

impl Baseline {
    /// After a full dump whose segment counts were read just before it: what the next
    /// looks compare with, or None when they must dump again (counts unreadable, or a
    /// connection waits in a queue).
    pub(super) fn after_dump(
        segments: Option<Segments>,
        records: &[SockRecord],
        found: InFlight,
    ) -> Option<Baseline> {
        Some(Baseline {
            segments: segments?,
            listeners: listeners(records)?,
            found,
        })
    }

    /// Whether this look needs the listeners at all: only when no segment moved.
    pub(super) fn quiet(&self, segments: Option<Segments>) -> bool {
        segments == Some(self.segments)
    }

    /// The last full dump's figures, when the listeners found now (a dump of them alone)
    /// are those it found.
    pub(super) fn still(&self, segments: Option<Segments>, now: &[SockRecord]) -> Option<InFlight> {
        (self.quiet(segments) && listeners(now).as_ref() == Some(&self.listeners))
            .then_some(self.found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sock_diag::testing::listener;
    use netlink_packet_sock_diag::constants::TCP_ESTABLISHED;

    fn connection(cookie: u64) -> SockRecord {
        SockRecord {
            local_port: 0,
            state: TCP_ESTABLISHED,
            inode: 9,
            rqueue: 0,
            wqueue: 0,
            cookie,
            info: None,
            ends: Default::default(),
        }
    }

    const FOUND: InFlight = InFlight {
        requests: 2,
        accept_queue: Some(0),
    };

    #[test]
    fn the_last_dump_stands_only_while_nothing_moved() {
        let dump = [listener(1, 0, 128), connection(5), connection(6)];
        let base = Baseline::after_dump(Some((100, 200)), &dump, FOUND).unwrap();
        // What changed, the counts now, the listeners now, what the look gets.
        type Case = (
            &'static str,
            Option<Segments>,
            Vec<SockRecord>,
            Option<InFlight>,
        );
        let cases: &[Case] = &[
            (
                "quiet",
                Some((100, 200)),
                vec![listener(1, 0, 128)],
                Some(FOUND),
            ),
            (
                "a segment in",
                Some((101, 200)),
                vec![listener(1, 0, 128)],
                None,
            ),
            (
                "a segment out",
                Some((100, 201)),
                vec![listener(1, 0, 128)],
                None,
            ),
            ("counts unreadable", None, vec![listener(1, 0, 128)], None),
            // What the app does without a segment.
            (
                "a connection waits",
                Some((100, 200)),
                vec![listener(1, 1, 128)],
                None,
            ),
            ("closed its listener", Some((100, 200)), vec![], None),
            (
                "listened again",
                Some((100, 200)),
                vec![listener(2, 0, 128)],
                None,
            ),
            (
                "a second listener",
                Some((100, 200)),
                vec![listener(1, 0, 128), listener(3, 0, 5)],
                None,
            ),
            (
                "a new backlog",
                Some((100, 200)),
                vec![listener(1, 0, 4096)],
                None,
            ),
        ];
        for (what, segments, now, want) in cases {
            assert_eq!(&base.still(*segments, now), want, "{what}");
        }
        assert!(base.quiet(Some((100, 200))) && !base.quiet(Some((100, 201))));
        // Listeners in another order are the same listeners.
        let two = [listener(3, 0, 5), listener(1, 0, 128)];
        let base = Baseline::after_dump(Some((1, 1)), &two, FOUND).unwrap();
        assert_eq!(
            base.still(Some((1, 1)), &[listener(1, 0, 128), listener(3, 0, 5)]),
            Some(FOUND)
        );
        // Nothing listening yet is a state like any other: a listener appearing ends it.
        let none = Baseline::after_dump(Some((1, 1)), &[], FOUND).unwrap();
        assert_eq!(none.still(Some((1, 1)), &[]), Some(FOUND));
        assert_eq!(none.still(Some((1, 1)), &[listener(1, 0, 5)]), None);
    }

    #[test]
    fn a_waiting_connection_or_unreadable_counts_leave_no_baseline() {
        let queued = [listener(1, 1, 128), connection(5)];
        assert_eq!(Baseline::after_dump(Some((1, 1)), &queued, FOUND), None);
        let idle = [listener(1, 0, 128)];
        assert_eq!(Baseline::after_dump(None, &idle, FOUND), None);
    }
}
