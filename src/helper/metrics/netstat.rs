//! The network namespace's TCP counters, from /proc/net/snmp (`Tcp: PassiveOpens`) and
//! /proc/net/netstat (`TcpExt: ListenOverflows`, `ListenDrops`): a pure parser for their
//! two-line tables, and the reading. /proc/net is the reading thread's own network
//! namespace, which is the container's (a pod's, an awsvpc task's).
#![forbid(unsafe_code)]

/// The namespace's counters that lifeguard reads; each `None` when unreadable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Connections accepted by any listener of the namespace (the handshake completed).
    pub passive_opens: Option<u64>,
    /// Completed handshakes dropped because an accept queue was full.
    pub listen_overflows: Option<u64>,
    /// Connections dropped at a listener for any reason, overflows included.
    pub listen_drops: Option<u64>,
}

/// The value of `name` in the `section` table of a /proc/net/snmp-style text: a header
/// line `Section: Name Name ...` followed by a value line `Section: 1 2 ...`.
pub fn counter(text: &str, section: &str, name: &str) -> Option<u64> {
    let prefix = format!("{section}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let names = names[prefix.len()..].split_whitespace();
        let values = values[prefix.len()..].split_whitespace();
        if let Some((_, value)) = names.zip(values).find(|(n, _)| *n == name) {
            // Tcp: MaxConn is -1; a counter is never negative.
            return value.parse().ok();
        }
    }
    None
}

/// Reads the counters now (two small files; about 20 µs).
pub fn read() -> TcpCounters {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok();
    let netstat = std::fs::read_to_string("/proc/net/netstat").ok();
    TcpCounters {
        passive_opens: snmp
            .as_deref()
            .and_then(|t| counter(t, "Tcp", "PassiveOpens")),
        listen_overflows: netstat
            .as_deref()
            .and_then(|t| counter(t, "TcpExt", "ListenOverflows")),
        listen_drops: netstat
            .as_deref()
            .and_then(|t| counter(t, "TcpExt", "ListenDrops")),
    }
}

/// The namespace's TCP segments received and sent (`Tcp: InSegs`, `OutSegs`), from
/// /proc/net/snmp alone: every change to a connection's state, and every connection
/// made, moves one of them (metrics/inflight/quiet.rs).
pub fn segments() -> Option<(u64, u64)> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    Some((
        counter(&snmp, "Tcp", "InSegs")?,
        counter(&snmp, "Tcp", "OutSegs")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded on Linux 6.18 (abridged columns, real layout).
    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives\n\
        Ip: 1 64 208262\n\
        Icmp: InMsgs InErrors\n\
        Icmp: 40 0\n\
        Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs\n\
        Tcp: 1 200 120000 -1 4171 3816 14 191 23 208011 231598\n\
        Udp: InDatagrams NoPorts\n\
        Udp: 1022 5\n";
    const NETSTAT: &str =
        "TcpExt: SyncookiesSent SyncookiesRecv ListenOverflows ListenDrops TCPBacklogDrop\n\
        TcpExt: 0 0 17 19 0\n\
        IpExt: InNoRoutes InTruncatedPkts\n\
        IpExt: 0 0\n";

    #[test]
    fn counters_come_from_their_own_table() {
        assert_eq!(counter(SNMP, "Tcp", "PassiveOpens"), Some(3816));
        assert_eq!(counter(SNMP, "Tcp", "ActiveOpens"), Some(4171));
        assert_eq!(counter(SNMP, "Tcp", "OutSegs"), Some(231598));
        assert_eq!(counter(SNMP, "Udp", "NoPorts"), Some(5));
        assert_eq!(counter(NETSTAT, "TcpExt", "ListenOverflows"), Some(17));
        assert_eq!(counter(NETSTAT, "TcpExt", "ListenDrops"), Some(19));
        // Absent, negative, or a table cut short: no value, never a wrong one.
        assert_eq!(counter(SNMP, "Tcp", "NoSuchThing"), None);
        assert_eq!(counter(SNMP, "Tcp", "MaxConn"), None);
        assert_eq!(counter("Tcp: PassiveOpens\n", "Tcp", "PassiveOpens"), None);
        assert_eq!(counter("", "Tcp", "PassiveOpens"), None);
        assert_eq!(counter(NETSTAT, "Tcp", "ListenDrops"), None);
    }

    #[test]
    fn this_machine_has_them() {
        let now = read();
        assert!(now.passive_opens.is_some(), "{now:?}");
        assert!(segments().is_some());
        assert!(
            now.listen_overflows.is_some() && now.listen_drops.is_some(),
            "{now:?}"
        );
    }
}
