//! The listener's saturation on `--inflight-port`: its backlog and how long the oldest
//! connection in its accept queue has waited, from the sampler's sock_diag dump, beside
//! the network namespace's TCP counters (`ListenOverflows`, `ListenDrops`,
//! `PassiveOpens`); and the warnings for them — a small backlog, overflows, long waits
//! in the queue — decided by a pure watcher fed one look a sample.
#![forbid(unsafe_code)]

use std::fmt;
use std::time::{Duration, Instant};

use netlink_packet_sock_diag::constants::{TCP_CLOSE_WAIT, TCP_ESTABLISHED, TCP_LISTEN};

use super::inflight::SockRecord;
use super::netstat::TcpCounters;
use super::sample::ListenFigures;

/// A backlog below this is warned about: the kernel's own default cap (somaxconn) was
/// 128 until Linux 5.4, and servers that take it from a library default often have 5
/// (Python's socketserver) or 50.
pub const SMALL_BACKLOG: u64 = 128;
/// A connection that has waited this long in the accept queue is warned about: an app
/// that keeps up accepts within milliseconds.
pub const LONG_WAIT: Duration = Duration::from_secs(1);
/// A warning that keeps applying is repeated at most this often, with what happened
/// meanwhile.
pub const REPEAT_AFTER: Duration = Duration::from_secs(60);

/// The port's listeners in one dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    /// The listeners' backlogs, summed: each has a queue of its own (several with
    /// SO_REUSEPORT, or IPv4 beside IPv6), and the accept queue figure is their sum.
    pub backlog: u64,
    /// The smallest of them: the queue that overflows first.
    pub smallest_backlog: u64,
    /// Milliseconds since the handshake of the oldest connection still waiting to be
    /// accepted; 0 when none waits; None when one came without its tcp_info.
    pub oldest_queued_ms: Option<u32>,
}

/// The listeners on the port in a dump's records; None when nothing listens.
///
/// A listener's `idiag_wqueue` is its backlog (`sk_max_ack_backlog`, as the app asked,
/// capped by somaxconn). A connection still in the accept queue is dumped as a socket
/// of its own with inode 0 (no file until `accept()`), with its tcp_info: its
/// `tcpi_last_data_sent` counts from the socket's creation when the handshake completed
/// (`lsndtime` is set then, and only data sent moves it, which no app has done on a
/// connection it has not accepted): how long it has waited in the queue.
pub fn listener(records: &[SockRecord]) -> Option<Listener> {
    let mut found: Option<Listener> = None;
    let mut oldest = Some(0u32);
    for record in records {
        match record.state {
            TCP_LISTEN => {
                let backlog = u64::from(record.wqueue);
                let listener = found.get_or_insert(Listener {
                    backlog: 0,
                    smallest_backlog: backlog,
                    oldest_queued_ms: None,
                });
                listener.backlog += backlog;
                listener.smallest_backlog = listener.smallest_backlog.min(backlog);
            }
            TCP_ESTABLISHED | TCP_CLOSE_WAIT if record.inode == 0 => {
                oldest = oldest
                    .zip(record.info)
                    .map(|(o, info)| o.max(info.last_data_sent_ms))
            }
            _ => {}
        }
    }
    found.map(|listener| Listener {
        oldest_queued_ms: oldest,
        ..listener
    })
}

/// The sample's listen figures: the listener's (absent while nothing listens, or when
/// the dump failed) and the namespace's counters.
pub fn figures(listener: Option<&Listener>, counters: &TcpCounters) -> ListenFigures {
    ListenFigures {
        backlog: listener.map(|l| l.backlog),
        oldest_queued_seconds: listener
            .and_then(|l| l.oldest_queued_ms)
            .map(|ms| f64::from(ms) / 1000.0),
        overflows: counters.listen_overflows,
        drops: counters.listen_drops,
        passive_opens: counters.passive_opens,
    }
}

/// What the watcher has to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// The first sample that saw the listener found a backlog below `SMALL_BACKLOG`.
    SmallBacklog { port: u16, backlog: u64 },
    /// The namespace's `ListenOverflows` grew by `count` since lifeguard's first look
    /// (`first`) or since the last such warning.
    Overflows {
        port: u16,
        count: u64,
        first: bool,
        backlog: Option<u64>,
    },
    /// A connection waited `waited` in the accept queue (the longest seen since the
    /// last such warning).
    LongWait { port: u16, waited: Duration },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::SmallBacklog { port, backlog } => write!(
                f,
                "the app listens on port {port} with a backlog of {backlog}: once more than \
                 {backlog} connections wait to be accepted, the kernel drops new ones and \
                 clients retry only after 1 s, 3 s, 7 s (a balancer may time out first); \
                 pass listen() a backlog of 1024 or more (Python's socketserver: \
                 request_queue_size; gunicorn/uvicorn: --backlog), and raise \
                 net.core.somaxconn if it caps it"
            ),
            Warning::Overflows {
                port,
                count,
                first,
                backlog,
            } => {
                let since = if *first {
                    "since lifeguard started"
                } else {
                    "in the last minute"
                };
                let backlog = backlog.map_or("nothing listens on it now".to_string(), |b| {
                    format!("its backlog is {b}")
                });
                write!(
                    f,
                    "{count} connections were dropped {since} because an accept queue was \
                     full (TcpExt ListenOverflows of the network namespace); port {port}: \
                     {backlog}. Raise the app's listen() backlog and make it accept sooner \
                     (an accepting thread starved behind its workers, or too few workers)"
                )
            }
            Warning::LongWait { port, waited } => write!(
                f,
                "a connection has waited {:.1} s in the accept queue of port {port}: the \
                 app accepts too slowly (its accepting thread starved behind its workers, \
                 or every worker busy), and the client sees a slow connect or a balancer \
                 timeout; accept on a thread (or event loop) that workers cannot starve, \
                 and add workers",
                waited.as_secs_f64()
            ),
        }
    }
}

/// Decides the warnings, one look a sample. Overflows before lifeguard's first look are
/// the namespace's past (on a host, since boot) and are not warned about.
#[derive(Debug, Default)]
pub struct Watch {
    saw_listener: bool,
    overflows_seen: Option<u64>,
    overflows_pending: u64,
    overflows_said: Option<Instant>,
    wait_pending: Option<Duration>,
    wait_said: Option<Instant>,
}

/// Whether a warning last said at `said` may be said again at `now`.
fn due(said: Option<Instant>, now: Instant) -> bool {
    said.is_none_or(|at| now.saturating_duration_since(at) >= REPEAT_AFTER)
}

impl Watch {
    /// `listener`: this sample's (None: nothing listens, or the dump failed);
    /// `overflows`: the namespace's counter (None: unreadable).
    pub fn next(
        &mut self,
        now: Instant,
        port: u16,
        listener: Option<&Listener>,
        overflows: Option<u64>,
    ) -> Vec<Warning> {
        let mut out = Vec::new();
        if let Some(l) = listener {
            if !std::mem::replace(&mut self.saw_listener, true)
                && l.smallest_backlog < SMALL_BACKLOG
            {
                out.push(Warning::SmallBacklog {
                    port,
                    backlog: l.smallest_backlog,
                });
            }
        }
        if let Some(count) = overflows {
            if let Some(seen) = self.overflows_seen {
                // A counter never goes back; if it does (another namespace's), it is the
                // new base.
                self.overflows_pending += count.saturating_sub(seen);
            }
            self.overflows_seen = Some(count);
        }
        if self.overflows_pending > 0 && due(self.overflows_said, now) {
            out.push(Warning::Overflows {
                port,
                count: std::mem::take(&mut self.overflows_pending),
                first: self.overflows_said.is_none(),
                backlog: listener.map(|l| l.backlog),
            });
            self.overflows_said = Some(now);
        }
        if let Some(waited) = listener
            .and_then(|l| l.oldest_queued_ms)
            .map(|ms| Duration::from_millis(u64::from(ms)))
            .filter(|w| *w >= LONG_WAIT)
        {
            self.wait_pending = Some(self.wait_pending.map_or(waited, |w| w.max(waited)));
        }
        if self.wait_pending.is_some() && due(self.wait_said, now) {
            out.push(Warning::LongWait {
                port,
                waited: self.wait_pending.take().unwrap_or_default(),
            });
            self.wait_said = Some(now);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::helper::metrics::inflight::TcpInfoFields;

    fn listening(backlog: u32, queued: u32) -> SockRecord {
        crate::sock_diag::testing::listener(1, queued, backlog)
    }

    fn connection(state: u8, inode: u32, sent_ms_ago: u32) -> SockRecord {
        SockRecord {
            local_port: 0,
            state,
            inode,
            rqueue: 0,
            wqueue: 0,
            cookie: 2,
            info: Some(TcpInfoFields {
                bytes_received: 18,
                bytes_sent: 0,
                last_data_recv_ms: 5,
                last_data_sent_ms: sent_ms_ago,
            }),
            ends: Default::default(),
        }
    }

    #[test]
    fn listener_figures_from_a_dump() {
        let queued = |ms| connection(TCP_ESTABLISHED, 0, ms);
        let cases: &[(&str, Vec<SockRecord>, Option<Listener>)] = &[
            ("nothing listens", vec![queued(3000)], None),
            (
                "one listener, empty queue",
                vec![listening(5, 0), connection(TCP_ESTABLISHED, 40, 9000)],
                Some(Listener {
                    backlog: 5,
                    smallest_backlog: 5,
                    oldest_queued_ms: Some(0),
                }),
            ),
            (
                // Accepted connections (with an inode) are not waiting, however old.
                "two queued, the oldest counts; a half-closed one waits too",
                vec![
                    queued(1508),
                    listening(5, 3),
                    connection(TCP_CLOSE_WAIT, 0, 3008),
                    connection(TCP_ESTABLISHED, 41, 60_000),
                ],
                Some(Listener {
                    backlog: 5,
                    smallest_backlog: 5,
                    oldest_queued_ms: Some(3008),
                }),
            ),
            (
                "IPv4 beside IPv6: summed, the smaller overflows first",
                vec![listening(4096, 0), listening(50, 0)],
                Some(Listener {
                    backlog: 4146,
                    smallest_backlog: 50,
                    oldest_queued_ms: Some(0),
                }),
            ),
            (
                "a queued connection without tcp_info: no age, never a wrong one",
                vec![
                    listening(128, 1),
                    SockRecord {
                        info: None,
                        ..queued(0)
                    },
                ],
                Some(Listener {
                    backlog: 128,
                    smallest_backlog: 128,
                    oldest_queued_ms: None,
                }),
            ),
        ];
        for (what, records, want) in cases {
            assert_eq!(&listener(records), want, "{what}");
        }
        let counters = TcpCounters {
            passive_opens: Some(9),
            listen_overflows: Some(3),
            listen_drops: Some(4),
        };
        let l = listener(&[listening(5, 1), queued(2500)]);
        assert_eq!(
            figures(l.as_ref(), &counters),
            ListenFigures {
                backlog: Some(5),
                oldest_queued_seconds: Some(2.5),
                overflows: Some(3),
                drops: Some(4),
                passive_opens: Some(9),
            }
        );
        let none = figures(None, &TcpCounters::default());
        assert_eq!(none, ListenFigures::default());
    }

    /// One look: seconds from the start, the listener (backlog, oldest wait in ms) if
    /// one listens, the overflow counter; then what the watcher must say, in short:
    /// "small 5", "overflows 17 first", "overflows 3", "wait 2.5".
    type Row = (
        u64,
        Option<(u64, u32)>,
        Option<u64>,
        &'static [&'static str],
    );

    fn said(warnings: &[Warning]) -> Vec<String> {
        warnings
            .iter()
            .map(|w| match w {
                Warning::SmallBacklog { backlog, .. } => format!("small {backlog}"),
                Warning::Overflows { count, first, .. } => {
                    format!("overflows {count}{}", if *first { " first" } else { "" })
                }
                Warning::LongWait { waited, .. } => format!("wait {}", waited.as_secs_f64()),
            })
            .collect()
    }

    fn run(rows: &[Row]) {
        let t0 = Instant::now();
        let mut watch = Watch::default();
        for (i, (secs, listen, overflows, want)) in rows.iter().enumerate() {
            let l = listen.map(|(backlog, waited)| Listener {
                backlog,
                smallest_backlog: backlog,
                oldest_queued_ms: Some(waited),
            });
            let got = watch.next(
                t0 + Duration::from_secs(*secs),
                8080,
                l.as_ref(),
                *overflows,
            );
            assert_eq!(said(&got), *want, "row {i}: {:?}", rows[i]);
        }
    }

    #[test]
    fn a_small_backlog_is_said_once_when_the_listener_is_first_seen() {
        run(&[
            (0, None, Some(0), &[]),
            (1, Some((5, 0)), Some(0), &["small 5"]),
            (2, Some((5, 0)), Some(0), &[]),
            (3, None, Some(0), &[]),
            (4, Some((5, 0)), Some(0), &[]),
        ]);
        run(&[
            (0, Some((127, 0)), None, &["small 127"]),
            (1, Some((127, 0)), None, &[]),
        ]);
        // 128 and up: nothing, and a later smaller backlog is not "start-up".
        run(&[
            (0, Some((128, 0)), None, &[]),
            (1, Some((4096, 0)), None, &[]),
            (2, Some((5, 0)), None, &[]),
        ]);
    }

    #[test]
    fn overflows_are_said_at_once_then_at_most_once_a_minute_with_the_count() {
        run(&[
            // The namespace's past is no news.
            (0, Some((4096, 0)), Some(1000), &[]),
            (1, Some((4096, 0)), Some(1000), &[]),
            (2, Some((4096, 0)), Some(1017), &["overflows 17 first"]),
            (3, Some((4096, 0)), Some(1019), &[]),
            (30, Some((4096, 0)), Some(1020), &[]),
            // An unreadable counter loses nothing.
            (40, Some((4096, 0)), None, &[]),
            (61, Some((4096, 0)), Some(1021), &[]),
            (62, Some((4096, 0)), Some(1022), &["overflows 5"]),
            (63, Some((4096, 0)), Some(1022), &[]),
            // Quiet for long: the next one is said at once.
            (500, Some((4096, 0)), Some(1023), &["overflows 1"]),
        ]);
        // Without a baseline first, nothing is said; a counter that goes back is a new
        // base.
        run(&[
            (0, None, None, &[]),
            (1, None, Some(7), &[]),
            (2, None, Some(2), &[]),
            (3, None, Some(4), &["overflows 2 first"]),
        ]);
    }

    #[test]
    fn long_waits_in_the_queue_are_said_at_once_then_at_most_once_a_minute() {
        run(&[
            (0, Some((4096, 999)), None, &[]),
            (1, Some((4096, 2500)), None, &["wait 2.5"]),
            (2, Some((4096, 9000)), None, &[]),
            (3, Some((4096, 0)), None, &[]),
            (61, Some((4096, 1000)), None, &["wait 9"]),
            (62, None, None, &[]),
            (200, Some((4096, 0)), None, &[]),
        ]);
    }

    #[test]
    fn warnings_name_the_port_the_figure_and_the_fix() {
        let small = Warning::SmallBacklog {
            port: 8080,
            backlog: 5,
        }
        .to_string();
        for part in [
            "port 8080",
            "backlog of 5",
            "backlog of 1024 or more",
            "somaxconn",
        ] {
            assert!(small.contains(part), "{part}: {small}");
        }
        let over = Warning::Overflows {
            port: 8080,
            count: 17,
            first: true,
            backlog: Some(5),
        }
        .to_string();
        for part in [
            "17 connections",
            "ListenOverflows",
            "port 8080",
            "backlog is 5",
        ] {
            assert!(over.contains(part), "{part}: {over}");
        }
        let wait = Warning::LongWait {
            port: 8080,
            waited: Duration::from_millis(2500),
        }
        .to_string();
        assert!(
            wait.contains("waited 2.5 s") && wait.contains("port 8080"),
            "{wait}"
        );
    }
}
