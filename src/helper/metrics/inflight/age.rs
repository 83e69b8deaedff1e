//! How long the app's requests take, read from the kernel's two clocks of each connection
//! on the port (`tcp_info`'s milliseconds since data last arrived and since data was last
//! sent), pure: the oldest request received and not yet answered, and the response times
//! of the answers sent since the previous dump.
//!
//! What a dump can tell, and what it cannot (docs/metrics.md, "Request age"):
//! - A connection whose data last arrived after it last sent has a request waiting for
//!   its answer, received that long ago: the oldest of them is the oldest request. A
//!   request that came in several segments (a large upload) is dated by its last one.
//! - A connection that has sent since the previous dump and is idle now (it last sent
//!   after data last arrived) answered its last request: the difference of its two
//!   clocks is that request's response time, from its last byte in to the answer's last
//!   byte out. One per connection and dump: the earlier answers between two dumps, a
//!   connection that opens and closes between them (one request per connection),
//!   pipelined requests and a connection never idle at a dump (back-to-back requests)
//!   give none. The samples are the answers the dumps find idle; which answer that is
//!   depends on the gap after it, not on its length, so the distribution is not skewed
//!   towards slow or fast answers where clients pause between requests.
//! - Each answer counts once: a response still being sent at the next dump (a download,
//!   a server-sent event stream) is the same request (no byte received since), and is
//!   not sampled again, so a long stream does not fill the histogram at every look.
//!   Its one sample is taken at the first dump that finds it sending: the time to the
//!   last byte sent by then.
//! - Only established connections count. One the client has closed (CLOSE_WAIT), whose
//!   FIN the app has yet to read, is not a request waiting: it would pin the oldest age
//!   until the app closes it.
//! - Both clocks tick in jiffies (4 ms at the common HZ=250), so each figure is good to
//!   a jiffy.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use netlink_packet_sock_diag::constants::TCP_ESTABLISHED;

use crate::sock_diag::count::SockRecord;

/// The response-time histogram's upper bounds, in seconds: from 5 ms (a cached answer,
/// within two jiffies) to 30 s (the longest a balancer waits by default: an ALB's idle
/// timeout is 60 s, its health checks and most clients give up long before).
pub const RESPONSE_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Response times since the sampler started: a Prometheus histogram's buckets
/// (cumulative at exposition, counted per bucket here), count and sum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ResponseTimes {
    /// How many fell in each bucket (at most its bound and above the previous one);
    /// the last counts those above 30 s.
    pub buckets: [u64; RESPONSE_BUCKETS.len() + 1],
    pub count: u64,
    pub sum_seconds: f64,
}

impl ResponseTimes {
    pub fn record(&mut self, took: Duration) {
        let seconds = took.as_secs_f64();
        let at = RESPONSE_BUCKETS.partition_point(|bound| *bound < seconds);
        self.buckets[at] += 1;
        self.count += 1;
        self.sum_seconds += seconds;
    }

    /// The cumulative counts of each bound, and of `+Inf` (the count) last.
    pub fn cumulative(&self) -> impl Iterator<Item = u64> + '_ {
        self.buckets.iter().scan(0u64, |total, n| {
            *total += n;
            Some(*total)
        })
    }
}

/// What the previous dumps left: each connection's bytes received when it was last found
/// answered (a connection found answered with the same count answered no new request
/// since), and the oldest waiting request's arrival.
#[derive(Debug, Default)]
pub struct Ages {
    answered: HashMap<u64, u64>,
    /// A dump has been read: the next one's answers are new (the first dump's are of
    /// unknown age, and are not counted).
    started: bool,
    oldest: Option<Instant>,
}

impl Ages {
    /// After a dump of the port's sockets taken at `taken`: the oldest waiting request,
    /// and each answer sent since the previous dump recorded in `responses`.
    pub fn dumped(
        &mut self,
        taken: Instant,
        sockets: &[SockRecord],
        responses: &mut ResponseTimes,
    ) {
        let mut answered = HashMap::with_capacity(self.answered.len());
        let mut oldest: Option<Duration> = None;
        for socket in sockets {
            if socket.state != TCP_ESTABLISHED {
                continue;
            }
            let Some(info) = socket.info else {
                continue;
            };
            if info.bytes_received == 0 {
                continue; // connected, nothing asked yet
            }
            // Both clocks are "milliseconds ago": the smaller is the more recent.
            let (recv, out) = (info.last_data_recv_ms, info.last_data_sent_ms);
            let waiting = socket.rqueue > 0 || info.bytes_sent == 0 || recv < out;
            let mut sampled = self.answered.get(&socket.cookie).copied();
            if waiting {
                // A connection still in the accept queue (no socket file yet) counts too:
                // its request has been received, and waits.
                let age = Duration::from_millis(u64::from(recv));
                oldest = Some(oldest.map_or(age, |o| o.max(age)));
            } else if sampled != Some(info.bytes_received) {
                // Answered since the previous dump, and not sampled yet (the first dump's
                // answers are of unknown age: marked, not counted).
                if self.started && socket.inode != 0 {
                    responses.record(Duration::from_millis(u64::from(recv - out)));
                }
                sampled = Some(info.bytes_received);
            }
            if let Some(received) = sampled {
                answered.insert(socket.cookie, received);
            }
        }
        self.answered = answered;
        self.started = true;
        self.oldest = oldest.map(|age| taken.checked_sub(age).unwrap_or(taken));
    }

    /// The oldest waiting request's age at `now`; zero when none waits. Also after a look
    /// that did without the dump (nothing moved in the namespace, so the same request is
    /// still the oldest, only older).
    pub fn oldest(&self, now: Instant) -> Duration {
        self.oldest
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at))
    }

    /// The dump failed: nothing is known until the next one, which starts afresh.
    pub fn forget(&mut self) {
        *self = Ages::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sock_diag::testing::info;
    use netlink_packet_sock_diag::constants::TCP_LISTEN;

    fn conn(cookie: u64, rqueue: u32, info: crate::sock_diag::count::TcpInfoFields) -> SockRecord {
        SockRecord {
            state: TCP_ESTABLISHED,
            inode: 10 + cookie as u32,
            rqueue,
            cookie,
            info: Some(info),
            ..Default::default()
        }
    }

    #[test]
    fn the_oldest_waiting_request_and_the_answers_since_the_last_dump() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let mut ages = Ages::default();
        let mut times = ResponseTimes::default();
        // First dump: one answered 30 ms after its request (of unknown age: not
        // counted), one waiting for 700 ms, one connected with nothing asked, a listener.
        ages.dumped(
            t0,
            &[
                conn(1, 0, info(100, 500, 40, 10)),
                conn(2, 0, info(100, 0, 700, 900)),
                conn(3, 0, info(0, 0, 50, 50)),
                SockRecord {
                    state: TCP_LISTEN,
                    ..Default::default()
                },
            ],
            &mut times,
        );
        assert_eq!(times.count, 0);
        assert_eq!(ages.oldest(t0), Duration::from_millis(700));
        // A look without a dump, half a second on: the same request, older.
        assert_eq!(
            ages.oldest(t0 + Duration::from_millis(500)),
            Duration::from_millis(1200)
        );
        // Next dump: connection 1 answered again (200 ms), 2 got its answer (1.7 s after its
        // request's last byte),
        // 3 sent a request 5 ms ago; a new connection answered within the dump's interval
        // (12 ms), a new one with unread bytes waits.
        let t1 = t0 + Duration::from_secs(1);
        ages.dumped(
            t1,
            &[
                conn(1, 0, info(200, 900, 300, 100)),
                conn(2, 0, info(100, 800, 1700, 0)),
                conn(3, 0, info(80, 0, 5, 1000)),
                conn(4, 0, info(80, 300, 20, 8)),
                conn(5, 80, info(80, 300, 400, 420)),
            ],
            &mut times,
        );
        assert_eq!(times.count, 3);
        assert!((times.sum_seconds - (0.2 + 1.7 + 0.012)).abs() < 1e-9);
        // 12 ms, 200 ms and 1.7 s: the 25 ms, 250 ms and 2.5 s buckets.
        assert_eq!(times.buckets[2] + times.buckets[5] + times.buckets[8], 3);
        let cumulative: Vec<u64> = times.cumulative().collect();
        assert_eq!(cumulative.len(), RESPONSE_BUCKETS.len() + 1);
        assert_eq!(*cumulative.last().unwrap(), 3);
        assert_eq!(cumulative[1], 0);
        assert_eq!(cumulative[2], 1);
        // The oldest waiting: the unread bytes of connection 5, 400 ms.
        assert_eq!(ages.oldest(t1), Duration::from_millis(400));
        // Nothing new sent: no new answer; nothing waiting: zero.
        ages.dumped(
            t1 + Duration::from_secs(1),
            &[conn(1, 0, info(200, 900, 1300, 1100))],
            &mut times,
        );
        assert_eq!(times.count, 3);
        assert_eq!(ages.oldest(t1 + Duration::from_secs(1)), Duration::ZERO);
        // After a failed dump the next one is a first again.
        ages.forget();
        ages.dumped(t1, &[conn(1, 0, info(300, 1000, 30, 5))], &mut times);
        assert_eq!(times.count, 3);
    }

    #[test]
    fn a_long_answer_counts_once_and_a_closing_connection_not_at_all() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let mut ages = Ages::default();
        let mut times = ResponseTimes::default();
        ages.dumped(t0, &[conn(1, 0, info(80, 0, 10, 10))], &mut times);
        // A stream: its request's answer goes on for three dumps, no byte received since.
        for (n, sent) in [(1u64, 4_000u64), (2, 9_000), (3, 15_000)] {
            let at = t0 + Duration::from_secs(n);
            let ago = 1000 * n as u32;
            ages.dumped(at, &[conn(1, 0, info(80, sent, ago + 10, 2))], &mut times);
        }
        assert_eq!(times.count, 1, "one request, one sample");
        // A new request on it, answered: a second sample.
        let at = t0 + Duration::from_secs(4);
        ages.dumped(at, &[conn(1, 0, info(160, 16_000, 30, 10))], &mut times);
        assert_eq!(times.count, 2);
        // The client closed; the app has not read the FIN nor the bytes before it: not a
        // request waiting, and no age pinned.
        let closing = SockRecord {
            state: netlink_packet_sock_diag::constants::TCP_CLOSE_WAIT,
            ..conn(2, 40, info(200, 100, 60_000, 70_000))
        };
        ages.dumped(at, &[closing], &mut times);
        assert_eq!(ages.oldest(at), Duration::ZERO);
        assert_eq!(times.count, 2);
    }

    #[test]
    fn each_bound_holds_what_is_at_most_it() {
        let mut times = ResponseTimes::default();
        for ms in [0, 5, 6, 30_000, 30_001] {
            times.record(Duration::from_millis(ms));
        }
        assert_eq!(times.buckets[0], 2, "0 and 5 ms are at most 5 ms");
        assert_eq!(times.buckets[1], 1);
        assert_eq!(times.buckets[RESPONSE_BUCKETS.len() - 1], 1, "30 s");
        assert_eq!(times.buckets[RESPONSE_BUCKETS.len()], 1, "above 30 s");
    }
}
