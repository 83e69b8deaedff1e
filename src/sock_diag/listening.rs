//! Whether anything listens on `--inflight-port`, and what does listen when nothing
//! does: a port given wrong (the app serves on 8000, the flag says 8080) would make
//! every drain end at its first look, the requests unseen, with no word said. Pure: the
//! watch decides from each sample's dump (the ports that do listen come from a dump of
//! the namespace's listeners, reader.rs); the sockstat parser reads recorded
//! text.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

/// How long the port may go without a listener once the app is ready before it is
/// said: apps bind a moment after they start, and one that restarts its server in
/// place (a reload) closes it for a moment.
pub const GRACE: Duration = Duration::from_secs(10);

/// What to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// The app has been ready this long and nothing listens on the port.
    WhileRunning(Duration),
    /// The app started this long ago and has not been ready since: nothing listens on
    /// the port, and with `--inflight-port` alone that is what ready waits for.
    WhileStarting(Duration),
    /// A drain began and the port was never seen listening: the drain's hold has
    /// nothing to look at.
    AtDrain,
}

#[derive(Clone, Debug, Default)]
pub struct PortWatch {
    missing_since: Option<Instant>,
    seen: bool,
    told_running: bool,
    told_draining: bool,
}

impl PortWatch {
    /// One sample: `listening` as its dump found it (None: the dump failed, no news);
    /// `ready` whether the app is ready (Running), `starting` whether it has started and
    /// is not ready yet, `draining` whether a drain began.
    pub fn next(
        &mut self,
        listening: Option<bool>,
        ready: bool,
        starting: bool,
        draining: bool,
        now: Instant,
    ) -> Option<Miss> {
        match listening {
            Some(true) => {
                self.seen = true;
                self.missing_since = None;
                // A later outage is news again.
                self.told_running = false;
                None
            }
            Some(false) if draining => (!self.seen
                && !std::mem::replace(&mut self.told_draining, true))
            .then_some(Miss::AtDrain),
            Some(false) if ready || starting => {
                let since = *self.missing_since.get_or_insert(now);
                let missing = now.saturating_duration_since(since);
                let kind = if ready {
                    Miss::WhileRunning(missing)
                } else {
                    Miss::WhileStarting(missing)
                };
                (missing >= GRACE && !std::mem::replace(&mut self.told_running, true))
                    .then_some(kind)
            }
            Some(false) | None => None,
        }
    }
}

/// Whether something listens on a TCP port in this network namespace, IPv4 or IPv6:
/// the implied app check of `--inflight-port` alone (ready means the app's port
/// listens). A dump of the port's listeners over sock_diag (the kernel filters by port:
/// the cost does not grow with the namespace's connections); where sock_diag cannot be
/// had (an emulator, a kernel without it), the listeners of `/proc/net/tcp` and `tcp6`.
pub struct PortListens {
    port: u16,
    /// Opened at first use, and again after a failure.
    reader: Option<super::reader::InFlightReader>,
}

impl PortListens {
    pub fn new(port: u16) -> PortListens {
        PortListens { port, reader: None }
    }

    pub fn now(&mut self) -> Result<bool, String> {
        if self.reader.is_none() {
            self.reader = super::reader::InFlightReader::new(self.port).ok();
        }
        if let Some(open) = &mut self.reader {
            if let Ok(listeners) = open.sample_listeners() {
                return Ok(!listeners.is_empty());
            }
            self.reader = None;
        }
        let mut read_any = false;
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            if let Ok(text) = std::fs::read_to_string(table) {
                read_any = true;
                if proc_net_listens(&text, self.port) {
                    return Ok(true);
                }
            }
        }
        if read_any {
            Ok(false)
        } else {
            Err("neither sock_diag nor /proc/net/tcp can be read".into())
        }
    }
}

/// The sockets listening on a TCP port in this network namespace, both families, by
/// sock_diag alone: the readiness mirror's look. One kernel-filtered dump of the
/// listening hash (a few µs of CPU); no `/proc/net/tcp` fallback, whose read walks every
/// connection of the namespace and costs milliseconds, which a starved check cannot
/// spend. Never a connection to the port.
pub struct Listeners {
    port: u16,
    /// Opened at first use, and again after a failure.
    reader: Option<super::reader::InFlightReader>,
}

impl Listeners {
    pub fn new(port: u16) -> Listeners {
        Listeners { port, reader: None }
    }

    /// The local addresses of the port's listeners (`[::]`, `0.0.0.0`, or one address
    /// each); an error where sock_diag cannot be had (a sandbox refusing netlink).
    pub fn now(&mut self) -> std::io::Result<Vec<std::net::SocketAddr>> {
        let reader = match &mut self.reader {
            Some(reader) => reader,
            None => self
                .reader
                .insert(super::reader::InFlightReader::new(self.port)?),
        };
        match reader.sample_listeners() {
            Ok(records) => Ok(records
                .iter()
                .filter(|r| r.state == netlink_packet_sock_diag::constants::TCP_LISTEN)
                .map(|r| r.ends.local)
                .collect()),
            Err(err) => {
                self.reader = None;
                Err(err)
            }
        }
    }
}

/// Whether a `/proc/net/tcp` (or `tcp6`) text has a listener (state 0A) on `port`.
fn proc_net_listens(text: &str, port: u16) -> bool {
    text.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1);
        let state = fields.nth(1);
        state == Some("0A")
            && local
                .and_then(|l| l.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port)
    })
}

/// The most TCP sockets a network namespace may hold for the drain to read its whole
/// table at every look (a pod's or a task's holds tens): past it the table is a
/// host's, and the namespace's counter stands alone.
pub const ATTRIBUTION_MAX: u64 = 512;

/// The TCP sockets of this network namespace, in use and in TIME_WAIT, from a
/// `/proc/net/sockstat` (and `sockstat6`) text: `TCP: inuse N orphan N tw N ...`.
pub fn tcp_sockets(sockstat: &str) -> Option<u64> {
    let line = sockstat
        .lines()
        .find_map(|l| l.strip_prefix("TCP: ").or_else(|| l.strip_prefix("TCP6: ")))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> Option<u64> {
        let at = words.iter().position(|w| *w == name)?;
        words.get(at + 1)?.parse().ok()
    };
    Some(field("inuse")? + field("tw").unwrap_or(0))
}

/// The TCP sockets of this network namespace, both families (one small read each).
pub fn tcp_sockets_here() -> Option<u64> {
    let v4 = std::fs::read_to_string("/proc/net/sockstat")
        .ok()
        .and_then(|t| tcp_sockets(&t))?;
    let v6 = std::fs::read_to_string("/proc/net/sockstat6")
        .ok()
        .and_then(|t| tcp_sockets(&t))
        .unwrap_or(0);
    Some(v4 + v6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_found_in_proc_net_tcp_by_port_and_state() {
        // Recorded on this machine: a listener on 8080 (0x1F90), a connection from
        // 8081 (0x1F91), and a listener on [::]:9595 (0x257B) in tcp6's form.
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41 1 0 100 0 0 10 0\n   1: 0100007F:1F91 0100007F:9C4A 01 00000000:00000000 00:00000000 00000000     0        0 42 1 0 20 4 30 10 -1\n";
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000000000000000000000000000:257B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 43 1 0 100 0 0 10 0\n";
        assert!(proc_net_listens(tcp, 8080));
        assert!(!proc_net_listens(tcp, 8081), "a connection is no listener");
        assert!(proc_net_listens(tcp6, 9595));
        assert!(!proc_net_listens(tcp6, 8080));
    }

    #[test]
    fn the_namespace_size_comes_from_sockstat() {
        let v4 = "sockets: used 27\nTCP: inuse 3 orphan 0 tw 9 alloc 3 mem 0\nUDP: inuse 0 mem 0\n";
        assert_eq!(tcp_sockets(v4), Some(12));
        assert_eq!(tcp_sockets("TCP6: inuse 2\nUDP6: inuse 0\n"), Some(2));
        assert_eq!(tcp_sockets("garbage"), None);
    }

    #[test]
    fn a_port_without_listener_is_said_once_after_the_grace_and_again_at_the_drain() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = PortWatch::default();
        // Before the app started (no phase yet): not the app's fault.
        assert_eq!(w.next(Some(false), false, false, false, s(0)), None);
        // Ready, nothing listens: said once the grace has passed, once.
        assert_eq!(w.next(Some(false), true, false, false, s(1)), None);
        assert_eq!(
            w.next(None, true, false, false, s(5)),
            None,
            "a failed dump is no news"
        );
        assert_eq!(
            w.next(Some(false), true, false, false, s(11)),
            Some(Miss::WhileRunning(GRACE))
        );
        assert_eq!(w.next(Some(false), true, false, false, s(12)), None);
        // The drain begins with the port never seen: said again, once.
        assert_eq!(
            w.next(Some(false), false, false, true, s(20)),
            Some(Miss::AtDrain)
        );
        assert_eq!(w.next(Some(false), false, false, true, s(21)), None);
    }

    #[test]
    fn an_app_that_never_listens_is_said_while_it_starts() {
        // --inflight-port alone: ready waits for the port, so a wrong one keeps the app
        // starting for ever; said once the grace has passed.
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = PortWatch::default();
        assert_eq!(w.next(Some(false), false, true, false, s(0)), None);
        assert_eq!(
            w.next(Some(false), false, true, false, s(10)),
            Some(Miss::WhileStarting(GRACE))
        );
        assert_eq!(w.next(Some(false), false, true, false, s(11)), None);
    }

    #[test]
    fn a_port_seen_listening_is_never_said_and_a_late_bind_resets_the_clock() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = PortWatch::default();
        assert_eq!(w.next(Some(false), true, false, false, s(0)), None);
        assert_eq!(w.next(Some(true), true, false, false, s(9)), None);
        assert_eq!(w.next(Some(false), true, false, false, s(10)), None);
        assert_eq!(
            w.next(Some(false), true, false, false, s(19)),
            None,
            "the clock restarted"
        );
        // The app closes its port on SIGTERM, as it may: not said at the drain.
        assert_eq!(w.next(Some(false), false, false, true, s(30)), None);
    }
}
