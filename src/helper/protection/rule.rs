//! When the task should be kept out of ECS scale-in, and which call to make next: a
//! pure state machine fed the sampler's looks at the oldest request's age and the
//! agent's answers (`look`, `answered`, `due`, `next_wake`); no I/O, no clock of its
//! own. The helper thread around it (mod.rs) makes the calls, one at a time.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

/// `ExpiresInMinutes` of every protection lifeguard asks for (ECS takes 1 to 2880, and
/// 120 when none is given). Short on purpose: it is the dead man's switch. A helper that
/// hangs, cannot reach the agent or can no longer see the port stops renewing, and the
/// task is back among those scale-in may pick within two minutes at most — a
/// protection left for hours would hold a service above its desired count for hours.
pub const EXPIRES_IN_MINUTES: u32 = 2;
/// A look older than this is no look: the sampler looks every second, and a late one
/// (the helper starved) neither sets nor clears anything.
const FRESH: Duration = Duration::from_secs(3);
/// The first pause after a failed call; each failure in a row doubles it, up to a
/// minute.
const FIRST_RETRY: Duration = Duration::from_secs(2);
/// The rule's other times, in minutes (`Rule::new` takes the minute's length: a real
/// one, except in the tests' fault-injection build):
/// - renewed once half the expiry has gone: a call a minute per protected task, and a
///   minute of retries before a renewal that keeps failing lets it lapse;
const RENEW_AFTER_MINUTES: u32 = 1;
/// - the settle time is `AFTER`, and at least a minute: a stream of long requests, where
///   a new one is younger than `AFTER` while its predecessor has just ended, keeps the
///   protection instead of clearing and setting it again each time;
const LEAST_SETTLE_MINUTES: u32 = 1;
/// - after AccessDenied, tried again every 5 minutes: the role's policy may be fixed
///   while the task runs, though not within seconds.
const DENIED_RETRY_MINUTES: u32 = 5;
/// - a failure spell that goes on is said again at most every 10 minutes: the log an
///   operator reads an hour into an outage says why the task is not protected now.
const STILL_FAILING_MINUTES: u32 = 10;

/// A call to the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// GET the state, once at start: a standalone task or a missing permission is said
    /// then, not at the first long request hours later; and a protection set before a
    /// helper restart is known.
    Read,
    /// PUT `ProtectionEnabled: true` with `EXPIRES_IN_MINUTES` (to set or renew it).
    Protect,
    /// PUT `ProtectionEnabled: false`.
    Clear,
}

impl Ask {
    pub fn describe(self) -> &'static str {
        match self {
            Ask::Read => "reading the task's scale-in protection",
            Ask::Protect => "setting the task's scale-in protection",
            Ask::Clear => "clearing the task's scale-in protection",
        }
    }
}

/// How a call ended, as the rule tells them apart.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// The agent's `protection`: whether the task is protected now.
    State { enabled: bool },
    /// A `failure` with reason `TASK_NOT_VALID`: the task belongs to no service.
    NotAService,
    /// `AccessDenied…`: the task role lacks a permission (the message says which).
    Denied(String),
    /// `Throttling…`, or HTTP 429.
    Throttled(String),
    /// No answer within the call's time: the agent may have carried the call out all
    /// the same (its own call to ECS may have succeeded after lifeguard stopped waiting).
    Unanswered(String),
    /// Anything else: the agent gone, another error or failure reason, an answer not
    /// understood.
    Failed(String),
}

/// What the rule has to say, for the log.
#[derive(Clone, Debug, PartialEq)]
pub enum Said {
    /// Protected: a request has been in flight this long.
    Protected {
        oldest: f64,
    },
    Renewed,
    /// Cleared: no request older than `AFTER` for this long (None: none seen since
    /// this helper started).
    Cleared {
        quiet_for: Option<Duration>,
    },
    /// The start's read: the task is (or is not) protected already; `foreign`: by a
    /// protection the Board does not know of, which lifeguard leaves alone.
    Found {
        enabled: bool,
        foreign: bool,
    },
    NotAService,
    /// The first AccessDenied of a spell.
    Denied {
        ask: Ask,
        message: String,
    },
    /// A PUT worked after AccessDenied: the role's policy was fixed.
    Permitted,
    /// The first failure of a spell, and when the next try comes.
    Failing {
        ask: Ask,
        reason: String,
        retry_in: Duration,
    },
    /// A failure spell goes on: `failed` calls so far, the last one's reason.
    StillFailing {
        failed: u32,
        reason: String,
    },
    /// A call worked after `failed` failures.
    Recovered {
        failed: u32,
    },
    /// The protection lapsed without being cleared: its renewal failed, or the look
    /// went blind.
    Lapsed,
}

#[derive(Clone, Debug)]
pub struct Rule {
    after: Duration,
    minute: Duration,
    settle: Duration,
    /// The protection the agent confirmed, until when (counted from the call's start).
    until: Option<Instant>,
    /// When that protection was asked for.
    confirmed: Option<Instant>,
    /// The latest look: when, and whether a request older than `after` was in flight
    /// (None: the sampler could not read the port).
    latest: Option<(Instant, Option<bool>)>,
    /// The latest look that saw such a request, and that request's age then.
    last_long: Option<Instant>,
    oldest: f64,
    read_done: bool,
    /// No call before this (the pause after a failure).
    retry_at: Option<Instant>,
    /// Failed calls in a row (the start's read aside).
    failures: u32,
    /// When the spell was last said.
    spell_said_at: Option<Instant>,
    /// AccessDenied has been said.
    denied_told: bool,
    /// Not a service's task: nothing more to ask.
    off: bool,
    /// A SIGTERM: the task is stopping, nothing more to ask.
    stopping: bool,
}

impl Rule {
    /// A rule for `AFTER` with minutes of `minute`, knowing what a predecessor helper
    /// left on the Board.
    pub fn new(after: Duration, minute: Duration, left: Option<Instant>, now: Instant) -> Rule {
        let left = left.filter(|until| *until > now);
        let expiry = minute * EXPIRES_IN_MINUTES;
        Rule {
            after,
            minute,
            settle: after.max(minute * LEAST_SETTLE_MINUTES),
            until: left,
            // Asked for an expiry ago (the Board holds the call's start plus it).
            confirmed: left.and_then(|until| until.checked_sub(expiry)),
            latest: None,
            // What the predecessor saw is unknown: counted as a long request seen at
            // the take-over, so the settle time runs from here as it would have run in
            // the predecessor — a restart between two jobs of a stream does not clear
            // the protection the next job needs.
            last_long: left.map(|_| now),
            oldest: 0.0,
            read_done: false,
            retry_at: None,
            failures: 0,
            spell_said_at: None,
            denied_told: false,
            off: false,
            stopping: false,
        }
    }

    /// How long a protection lasts unless renewed.
    pub fn expiry(&self) -> Duration {
        self.minute * EXPIRES_IN_MINUTES
    }

    fn renew_after(&self) -> Duration {
        self.minute * RENEW_AFTER_MINUTES
    }

    /// The settle time: how long no request older than `AFTER` is seen before the
    /// protection is cleared.
    pub fn settle(&self) -> Duration {
        self.settle
    }

    /// The protection the agent confirmed, if it has not lapsed by `now`.
    pub fn protected_until(&self, now: Instant) -> Option<Instant> {
        self.until.filter(|until| *until > now)
    }

    /// A look at the port: the oldest request's age in seconds (0 when none waits),
    /// None when the sampler could not read it.
    pub fn look(&mut self, taken: Instant, oldest: Option<f64>) {
        let long = oldest.map(|age| age >= self.after.as_secs_f64());
        if self.latest.is_some_and(|(latest, _)| latest > taken) {
            return;
        }
        self.latest = Some((taken, long));
        if let (Some(true), Some(age)) = (long, oldest) {
            self.last_long = Some(taken);
            self.oldest = age;
        }
    }

    /// The SIGTERM: from now on the task is stopping and nothing more is asked. A
    /// protection still set lapses by itself, and ECS does not hold a stopping task.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// The latest look, if fresh at `now`: whether it saw a long request.
    fn fresh(&self, now: Instant) -> Option<bool> {
        let (taken, long) = self.latest?;
        if now.saturating_duration_since(taken) > FRESH {
            return None;
        }
        long
    }

    fn settled(&self, now: Instant) -> bool {
        self.last_long
            .is_none_or(|at| now.saturating_duration_since(at) >= self.settle)
    }

    /// The call to make now, if any.
    pub fn due(&self, now: Instant) -> Option<Ask> {
        if self.off || self.stopping || self.retry_at.is_some_and(|at| now < at) {
            return None;
        }
        if !self.read_done {
            return Some(Ask::Read);
        }
        let fresh = self.fresh(now);
        if self.protected_until(now).is_none() {
            return (fresh == Some(true)).then_some(Ask::Protect);
        }
        if self.settled(now) {
            // Blind: neither renewed nor cleared; the expiry decides.
            return (fresh == Some(false)).then_some(Ask::Clear);
        }
        if fresh.is_none() {
            // Blind or late: a helper that cannot see the port does not renew either,
            // or a task whose port cannot be read would stay protected for the whole
            // settle time (AFTER) instead of lapsing within the expiry.
            return None;
        }
        let renew_at = self.confirmed.map(|at| at + self.renew_after());
        renew_at.is_some_and(|at| now >= at).then_some(Ask::Protect)
    }

    /// When after `now` `due` may change without a new look: a pause ends, a renewal or
    /// the settle time comes, the protection lapses. Only instants still to come: one
    /// already past (a renewal the blind looks did not make) would wake the loop for
    /// nothing, over and over.
    pub fn next_wake(&self, now: Instant) -> Option<Instant> {
        if self.off || self.stopping {
            return None;
        }
        let until = self.until;
        [
            self.retry_at,
            until.and(self.confirmed.map(|at| at + self.renew_after())),
            until.and(self.last_long.map(|at| at + self.settle)),
            until,
        ]
        .into_iter()
        .flatten()
        .filter(|at| *at > now)
        .min()
    }

    /// Notes a protection that lapsed without a call (said once).
    pub fn expire(&mut self, now: Instant) -> Option<Said> {
        if self.until.is_some_and(|until| until <= now) {
            self.until = None;
            self.confirmed = None;
            return Some(Said::Lapsed);
        }
        None
    }

    /// The answer to `ask`, sent at `sent`; `jitter` in [0, 1) spreads the retries of
    /// a fleet throttled at once.
    pub fn answered(
        &mut self,
        ask: Ask,
        sent: Instant,
        answer: Answer,
        now: Instant,
        jitter: f64,
    ) -> Vec<Said> {
        if ask == Ask::Read {
            // Read once, whatever came back: it only tells early.
            self.read_done = true;
        }
        let mut said = Vec::new();
        match answer {
            Answer::State { enabled } => {
                if ask != Ask::Read && enabled != (ask == Ask::Protect) {
                    // The other state than asked for: a failure like any other, before
                    // anything counts as working again (or each retry would start a new
                    // spell, with a line and the shortest pause).
                    let reason = format!("the agent answered ProtectionEnabled: {enabled}");
                    return self.failed(ask, reason, now, jitter);
                }
                said.extend(self.answers(ask));
                match ask {
                    Ask::Read => {
                        if !enabled {
                            self.until = None;
                            self.confirmed = None;
                        }
                        // Protected, and the Board knows of no protection of this
                        // lifeguard's: set by someone else (the app, another container of
                        // the task) or by an earlier run of this container. Not taken
                        // over, so never cleared by lifeguard for nothing: it lapses at
                        // the expiry it was set with (within two minutes if it was
                        // lifeguard's).
                        let foreign = enabled && self.until.is_none();
                        said.push(Said::Found { enabled, foreign });
                    }
                    Ask::Protect => {
                        let renewal = self.protected_until(sent).is_some();
                        self.until = Some(sent + self.expiry());
                        self.confirmed = Some(sent);
                        said.push(if renewal {
                            Said::Renewed
                        } else {
                            Said::Protected {
                                oldest: self.oldest,
                            }
                        });
                    }
                    Ask::Clear => {
                        self.until = None;
                        self.confirmed = None;
                        let quiet_for = self.last_long.map(|at| now.saturating_duration_since(at));
                        said.push(Said::Cleared { quiet_for });
                    }
                }
            }
            Answer::NotAService => {
                self.off = true;
                self.until = None;
                said.push(Said::NotAService);
            }
            Answer::Denied(message) => {
                // The agent answers (a failure spell ends), the role lacks a permission.
                said.extend(self.recovered());
                // Said once: the read's refusal stands for the PUT's too (both
                // permissions are named).
                if !self.denied_told {
                    said.push(Said::Denied { ask, message });
                    self.denied_told = true;
                }
                if ask != Ask::Read {
                    self.retry_at = Some(now + self.minute * DENIED_RETRY_MINUTES);
                }
            }
            Answer::Unanswered(reason) => {
                if ask == Ask::Protect {
                    // A set (or renewal) with no answer may have been carried out, as a
                    // clear may: counted as set until `sent` plus the expiry, so the gauge
                    // and the stop line say "protected" while ECS may hold the task, a
                    // clear follows if the long request ends first, and the retry after
                    // the pause renews it (below, as after a clear).
                    let maybe = sent + self.expiry();
                    self.until = Some(self.until.map_or(maybe, |until| until.max(maybe)));
                }
                return self.failed(ask, reason, now, jitter);
            }
            Answer::Throttled(reason) | Answer::Failed(reason) => {
                return self.failed(ask, reason, now, jitter);
            }
        }
        said
    }

    /// A call of `ask` worked: a failure spell, or a refusal of a PUT, ends.
    fn answers(&mut self, ask: Ask) -> Vec<Said> {
        let mut said: Vec<Said> = self.recovered().into_iter().collect();
        self.retry_at = None;
        if ask != Ask::Read && std::mem::take(&mut self.denied_told) {
            said.push(Said::Permitted);
        }
        said
    }

    /// The end of a failure spell, if one was going on.
    fn recovered(&mut self) -> Option<Said> {
        let failed = std::mem::take(&mut self.failures);
        (failed > 0).then_some(Said::Recovered { failed })
    }

    fn failed(&mut self, ask: Ask, reason: String, now: Instant, jitter: f64) -> Vec<Said> {
        if ask == Ask::Read {
            // Said, and not tried again: the first long request asks anyway, and its
            // own failure is said then (the read starts no spell).
            return vec![Said::Failing {
                ask,
                reason,
                retry_in: Duration::ZERO,
            }];
        }
        if ask == Ask::Clear || self.until.is_some() {
            // A clear that failed or timed out may still have been carried out: should
            // a long request come back, the protection is renewed at once, not a minute
            // after it was last set. So is a set or renewal that failed while the
            // protection stands (or may stand: an unanswered set): retried after the
            // pause.
            self.confirmed = now.checked_sub(self.renew_after());
        }
        self.failures += 1;
        let doubled = FIRST_RETRY.saturating_mul(1 << (self.failures - 1).min(10));
        let pause = doubled
            .min(self.minute)
            .mul_f64(1.0 + jitter.clamp(0.0, 1.0) / 2.0);
        self.retry_at = Some(now + pause);
        let said = if self.failures == 1 {
            Said::Failing {
                ask,
                reason,
                retry_in: pause,
            }
        } else if self.spell_said_at.is_some_and(|at| {
            now.saturating_duration_since(at) >= self.minute * STILL_FAILING_MINUTES
        }) {
            Said::StillFailing {
                failed: self.failures,
                reason,
            }
        } else {
            return Vec::new();
        };
        self.spell_said_at = Some(now);
        vec![said]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(30);
    const MINUTE: Duration = Duration::from_secs(60);

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    /// A rule past its start's read (the agent answered: not protected).
    fn started(t0: Instant) -> Rule {
        let mut rule = Rule::new(AFTER, MINUTE, None, t0);
        assert_eq!(rule.due(t0), Some(Ask::Read));
        let said = rule.answered(Ask::Read, t0, Answer::State { enabled: false }, t0, 0.0);
        assert_eq!(
            said,
            [Said::Found {
                enabled: false,
                foreign: false
            }]
        );
        rule
    }

    /// Feeds a look a second from `from` to `to` (seconds after t0), the oldest request's
    /// age given by `age(t)`, and answers every call the rule makes with `answer(ask)`;
    /// returns the calls made with their times and everything said.
    fn run(
        rule: &mut Rule,
        t0: Instant,
        (from, to): (u64, u64),
        age: impl Fn(u64) -> Option<f64>,
        answer: impl Fn(Ask) -> Answer,
    ) -> (Vec<(u64, Ask)>, Vec<Said>) {
        let (mut calls, mut said) = (Vec::new(), Vec::new());
        for t in from..=to {
            let now = t0 + s(t as f64);
            rule.look(now, age(t));
            said.extend(rule.expire(now));
            if let Some(ask) = rule.due(now) {
                calls.push((t, ask));
                said.extend(rule.answered(ask, now, answer(ask), now, 0.0));
            }
        }
        (calls, said)
    }

    fn agrees(ask: Ask) -> Answer {
        Answer::State {
            enabled: ask == Ask::Protect,
        }
    }

    #[test]
    fn a_long_request_protects_renews_and_clears_after_the_settle_time() {
        let t0 = Instant::now();
        let mut rule = started(t0);
        // One request from t=10 to t=200: older than 30 s from t=40.
        let age = |t: u64| {
            Some(if (10..200).contains(&t) {
                (t - 10) as f64
            } else {
                0.0
            })
        };
        let (calls, said) = run(&mut rule, t0, (1, 400), age, agrees);
        assert_eq!(
            calls,
            [
                (40, Ask::Protect),  // AFTER reached
                (100, Ask::Protect), // renewed a minute later
                (160, Ask::Protect),
                // The last long look, at 199, is within the settle time.
                (220, Ask::Protect),
                // The request ends at 200: cleared after the settle time (AFTER, at
                // least a minute).
                (259, Ask::Clear),
            ]
        );
        assert_eq!(said[0], Said::Protected { oldest: 30.0 });
        assert_eq!(said[1..4], [Said::Renewed, Said::Renewed, Said::Renewed]);
        assert_eq!(
            said[4],
            Said::Cleared {
                quiet_for: Some(s(60.0))
            }
        );
        assert_eq!(said.len(), 5);
        assert_eq!(rule.protected_until(t0 + s(258.0)), None);
        // Protected in between, for the expiry of the last renewal at least.
        let mut again = started(t0);
        run(&mut again, t0, (1, 45), age, agrees);
        assert_eq!(
            again.protected_until(t0 + s(45.0)),
            Some(t0 + s(40.0) + MINUTE * 2)
        );
    }

    #[test]
    fn steady_short_requests_never_protect() {
        // Every look has a request in flight, none older than a few seconds: the trap
        // of "any request in flight" (every task protected, no scale-in ever).
        let t0 = Instant::now();
        let mut rule = started(t0);
        let (calls, said) = run(
            &mut rule,
            t0,
            (1, 3600),
            |t| Some((t % 7) as f64 * 0.5),
            agrees,
        );
        assert_eq!(calls, []);
        assert_eq!(said, []);
    }

    #[test]
    fn a_stream_of_long_requests_keeps_one_protection() {
        // Jobs of 90 s back to back: each is younger than AFTER for its first 30 s.
        let t0 = Instant::now();
        let mut rule = started(t0);
        let (calls, _) = run(&mut rule, t0, (1, 600), |t| Some((t % 90) as f64), agrees);
        assert!(
            calls.iter().all(|(_, ask)| *ask == Ask::Protect),
            "{calls:?}"
        );
        // Set once, then renewed every minute: no flapping.
        assert_eq!(calls[0], (30, Ask::Protect));
        let gaps: Vec<u64> = calls.windows(2).map(|w| w[1].0 - w[0].0).collect();
        assert!(gaps.iter().all(|g| *g == 60), "{gaps:?}");
    }

    #[test]
    fn blind_looks_neither_set_renew_nor_clear_and_the_expiry_ends_it() {
        let t0 = Instant::now();
        let mut rule = started(t0);
        // Long request seen at 40, then the sampler cannot read from 41.
        let age = |t: u64| if t <= 40 { Some(t as f64) } else { None };
        let (calls, said) = run(&mut rule, t0, (1, 300), age, agrees);
        // Not renewed at 90, though the long request was seen within the settle time:
        // nothing is seen now. Neither renewed nor cleared: lapsed at 30 + 2 min.
        assert_eq!(calls, [(30, Ask::Protect)]);
        assert_eq!(said.last(), Some(&Said::Lapsed));
        assert_eq!(rule.protected_until(t0 + s(150.0)), None);
        // With AFTER ten minutes (settle ten minutes), still two minutes at most.
        let mut long = Rule::new(s(600.0), MINUTE, None, t0);
        long.answered(Ask::Read, t0, Answer::State { enabled: false }, t0, 0.0);
        let age = |t: u64| if t <= 700 { Some(t as f64) } else { None };
        let (calls, _) = run(&mut long, t0, (1, 1400), age, agrees);
        assert_eq!(calls, [(600, Ask::Protect), (660, Ask::Protect)]);
        assert_eq!(long.protected_until(t0 + s(780.0)), None);
        // Seen again: renewed at the first fresh look.
        let mut back = started(t0);
        let age = |t: u64| {
            if (41..=95).contains(&t) {
                None
            } else {
                Some(t as f64)
            }
        };
        let (calls, _) = run(&mut back, t0, (1, 100), age, agrees);
        assert_eq!(calls, [(30, Ask::Protect), (96, Ask::Protect)]);
        // A blind start never sets it.
        let mut blind = started(t0);
        assert_eq!(run(&mut blind, t0, (1, 300), |_| None, agrees).0, []);
        // Nor do looks that come late (a starved helper).
        let mut late = started(t0);
        late.look(t0, Some(100.0));
        assert_eq!(late.due(t0 + s(10.0)), None);
    }

    #[test]
    fn the_loop_is_never_woken_for_an_instant_already_past() {
        // Protected, then blind past the renewal, the settle time and a failed clear's
        // pause: nothing is due, and every wake-up named is still to come.
        let t0 = Instant::now();
        let mut rule = started(t0);
        run(&mut rule, t0, (1, 40), |t| Some(t as f64), agrees);
        let gone = |_: Ask| Answer::Failed("connection refused".into());
        run(&mut rule, t0, (41, 150), |t| (t < 100).then_some(0.0), gone);
        for t in 150..400 {
            let now = t0 + s(t as f64);
            rule.expire(now);
            if rule.due(now).is_none() {
                assert!(rule.next_wake(now).is_none_or(|at| at > now), "at {t}");
            }
        }
    }

    #[test]
    fn a_standalone_task_is_said_once_and_asked_no_more() {
        let t0 = Instant::now();
        let mut rule = Rule::new(AFTER, MINUTE, None, t0);
        let said = rule.answered(Ask::Read, t0, Answer::NotAService, t0, 0.0);
        assert_eq!(said, [Said::NotAService]);
        let (calls, said) = run(&mut rule, t0, (1, 600), |t| Some(t as f64), agrees);
        assert_eq!((calls, said), (vec![], vec![]));
        assert_eq!(rule.next_wake(t0), None);
    }

    #[test]
    fn access_denied_is_said_once_and_tried_again_every_five_minutes() {
        let t0 = Instant::now();
        let mut rule = started(t0);
        let denied =
            |_: Ask| Answer::Denied("not authorized to perform: ecs:UpdateTaskProtection".into());
        let (calls, said) = run(&mut rule, t0, (1, 1000), |t| Some(t as f64), denied);
        let times: Vec<u64> = calls.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, [30, 330, 630, 930]);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            matches!(&said[0], Said::Denied { ask: Ask::Protect, message } if message.contains("UpdateTaskProtection"))
        );
        // Once the policy is fixed, it works and says so.
        let (calls, said) = run(&mut rule, t0, (1001, 1300), |t| Some(t as f64), agrees);
        assert_eq!(calls[0], (1230, Ask::Protect));
        assert_eq!(
            said[..2],
            [Said::Permitted, Said::Protected { oldest: 1230.0 }]
        );
    }

    #[test]
    fn access_denied_and_the_agent_failing_are_spells_of_their_own() {
        let t0 = Instant::now();
        let mut rule = started(t0);
        rule.look(t0 + s(30.0), Some(30.0));
        let denied = Answer::Denied("not authorized".into());
        let said = rule.answered(Ask::Protect, t0 + s(30.0), denied, t0 + s(30.0), 0.0);
        assert!(matches!(&said[..], [Said::Denied { .. }]));
        // Five minutes on, the agent is gone: that spell is said, from its first pause.
        rule.look(t0 + s(330.0), Some(330.0));
        assert_eq!(rule.due(t0 + s(330.0)), Some(Ask::Protect));
        let gone = Answer::Failed("connection refused".into());
        let said = rule.answered(Ask::Protect, t0 + s(330.0), gone, t0 + s(330.0), 0.0);
        assert!(
            matches!(&said[..], [Said::Failing { retry_in, .. }] if *retry_in == s(2.0)),
            "{said:?}"
        );
        // It answers again, still refusing: the agent's spell ends, the refusal is not
        // said twice, and nothing is said to be permitted.
        let denied = Answer::Denied("not authorized".into());
        let said = rule.answered(Ask::Protect, t0 + s(332.0), denied, t0 + s(332.0), 0.0);
        assert_eq!(said, [Said::Recovered { failed: 1 }]);
    }

    #[test]
    fn an_answer_with_the_other_state_backs_off_as_a_failure() {
        let t0 = Instant::now();
        let mut rule = started(t0);
        let contrary = |ask: Ask| Answer::State {
            enabled: ask != Ask::Protect,
        };
        let (calls, said) = run(&mut rule, t0, (1, 100), |t| Some(t as f64), contrary);
        let times: Vec<u64> = calls.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, [30, 32, 36, 44, 60, 92]);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            matches!(&said[0], Said::Failing { reason, .. } if reason.contains("ProtectionEnabled: false"))
        );
        // Then agreeing: one line for the spell.
        let (_, said) = run(&mut rule, t0, (101, 200), |t| Some(t as f64), agrees);
        assert_eq!(said[0], Said::Recovered { failed: 6 });
    }

    #[test]
    fn a_failed_clear_is_renewed_at_once_when_a_long_request_comes_back() {
        // The clear timed out: the agent may have carried it out all the same.
        let t0 = Instant::now();
        let mut rule = started(t0);
        let age = |t: u64| Some(if t <= 40 { t as f64 } else { 0.0 });
        run(&mut rule, t0, (1, 99), age, agrees);
        let timeout = |_: Ask| Answer::Failed("the ECS agent did not answer within 5s".into());
        let (calls, _) = run(&mut rule, t0, (100, 100), age, timeout);
        assert_eq!(calls, [(100, Ask::Clear)]);
        // A long request again at 101: renewed after the failure's pause (2 s), not a
        // minute after the last renewal (at 90 + 60 = 150).
        let (calls, _) = run(&mut rule, t0, (101, 110), |t| Some(t as f64), agrees);
        assert_eq!(calls, [(102, Ask::Protect)]);
    }

    #[test]
    fn a_set_with_no_answer_counts_as_set_and_is_cleared_if_the_request_ends_first() {
        // The first set timed out: the agent may have set the protection all the same.
        let t0 = Instant::now();
        let mut rule = started(t0);
        // As agent.rs words it.
        let unanswered = |_: Ask| {
            Answer::Unanswered("the ECS agent did not answer within 5s (it may have carried the call out all the same)".into())
        };
        let (calls, said) = run(&mut rule, t0, (1, 30), |t| Some(t as f64), unanswered);
        assert_eq!(calls, [(30, Ask::Protect)]);
        assert!(
            matches!(&said[0], Said::Failing { ask: Ask::Protect, reason, .. } if reason.contains("may have carried the call out")),
            "{said:?}"
        );
        // Counted as set (the gauge, the stop line) for the expiry from the call's start.
        assert_eq!(
            rule.protected_until(t0 + s(31.0)),
            Some(t0 + s(30.0) + rule.expiry())
        );
        // The long request ends at once: the set is tried again after the pause (within
        // the settle time a protection is kept), and the clear comes when the settle time
        // has passed, rather than an unsaid protection ECS holds up to the expiry.
        let (calls, said) = run(&mut rule, t0, (31, 100), |_| Some(0.0), agrees);
        assert_eq!(calls, [(32, Ask::Protect), (90, Ask::Clear)]);
        assert!(
            matches!(said.last(), Some(Said::Cleared { .. })),
            "{said:?}"
        );
        assert_eq!(rule.protected_until(t0 + s(101.0)), None);
        // A refused connection carried nothing out: nothing counts as set.
        let mut refused = started(t0);
        let gone = |_: Ask| Answer::Failed("the ECS agent: connection refused".into());
        run(&mut refused, t0, (1, 30), |t| Some(t as f64), gone);
        assert_eq!(refused.protected_until(t0 + s(31.0)), None);
        // A set with no answer while the request goes on: retried after the pause, and
        // set for good then.
        let mut retried = started(t0);
        run(&mut retried, t0, (1, 30), |t| Some(t as f64), unanswered);
        let (calls, said) = run(&mut retried, t0, (31, 40), |t| Some(t as f64), agrees);
        assert_eq!(calls, [(32, Ask::Protect)]);
        assert!(said.contains(&Said::Recovered { failed: 1 }), "{said:?}");
    }

    #[test]
    fn throttling_and_a_gone_agent_back_off_one_call_at_a_time() {
        let t0 = Instant::now();
        let mut rule = started(t0);
        let throttled = |_: Ask| Answer::Throttled("ThrottlingException: Rate exceeded".into());
        let (calls, said) = run(&mut rule, t0, (1, 300), |t| Some(t as f64), throttled);
        let times: Vec<u64> = calls.iter().map(|(t, _)| *t).collect();
        // 2, 4, 8, 16, 32, then 60 s apart (the loop looks each second).
        assert_eq!(times, [30, 32, 36, 44, 60, 92, 152, 212, 272]);
        assert_eq!(said.len(), 1);
        assert!(
            matches!(&said[0], Said::Failing { ask: Ask::Protect, retry_in, .. } if *retry_in == s(2.0))
        );
        // Jitter stretches a pause by up to half.
        let mut jittered = started(t0);
        jittered.look(t0 + s(30.0), Some(30.0));
        let gone = Answer::Failed("the ECS agent: cannot connect: connection refused".into());
        jittered.answered(Ask::Protect, t0 + s(30.0), gone, t0 + s(30.0), 0.999);
        assert_eq!(jittered.due(t0 + s(32.9)), None);
        assert_eq!(
            jittered.next_wake(t0 + s(31.0)),
            Some(t0 + s(30.0) + s(2.0).mul_f64(1.4995))
        );
    }

    #[test]
    fn a_failure_spell_that_goes_on_is_said_again_every_ten_minutes() {
        let t0 = Instant::now();
        let mut rule = started(t0);
        let gone = |_: Ask| Answer::Failed("the ECS agent: connection refused".into());
        let (calls, said) = run(&mut rule, t0, (1, 1900), |t| Some(t as f64), gone);
        assert!(matches!(&said[0], Said::Failing { .. }), "{said:?}");
        let again: Vec<u32> = said[1..]
            .iter()
            .map(|s| match s {
                Said::StillFailing { failed, reason } if reason.contains("refused") => *failed,
                other => panic!("{other:?}"),
            })
            .collect();
        // From 30 s to 1,900 s, calls a minute apart after the first few: a line every
        // ten of them (every ten minutes), not one a call.
        assert_eq!(again, [15, 25, 35]);
        assert!(calls.len() > 30);
        let (_, said) = run(&mut rule, t0, (1901, 2000), |t| Some(t as f64), agrees);
        assert!(matches!(said[0], Said::Recovered { .. }));
    }

    #[test]
    fn a_failing_renewal_lets_the_protection_lapse() {
        let t0 = Instant::now();
        let mut rule = started(t0);
        let (calls, _) = run(&mut rule, t0, (1, 40), |t| Some(t as f64), agrees);
        assert_eq!(calls, [(30, Ask::Protect)]);
        let gone = |_: Ask| Answer::Failed("the ECS agent did not answer within 5s".into());
        let (_, said) = run(&mut rule, t0, (41, 200), |t| Some(t as f64), gone);
        assert!(matches!(
            said[0],
            Said::Failing {
                ask: Ask::Protect,
                ..
            }
        ));
        assert_eq!(said.last(), Some(&Said::Lapsed));
        assert_eq!(rule.protected_until(t0 + s(150.0)), None);
    }

    #[test]
    fn the_sigterm_stops_every_call() {
        let t0 = Instant::now();
        let mut rule = started(t0);
        run(&mut rule, t0, (1, 40), |t| Some(t as f64), agrees);
        rule.stop();
        let (calls, _) = run(&mut rule, t0, (41, 400), |_| Some(0.0), agrees);
        assert_eq!(calls, []);
        assert_eq!(rule.next_wake(t0), None);
    }

    #[test]
    fn a_protection_left_by_a_predecessor_is_cleared_after_the_settle_time() {
        // A helper started again finds the expiry on the Board (set 20 s before): the
        // settle time runs from the take-over, as if a long request was seen then, so
        // a restart between two jobs of a stream does not clear it at once.
        let t0 = Instant::now();
        let mut rule = Rule::new(AFTER, MINUTE, Some(t0 + s(100.0)), t0);
        assert!(rule.protected_until(t0).is_some());
        let said = rule.answered(Ask::Read, t0, Answer::State { enabled: true }, t0, 0.0);
        assert_eq!(
            said,
            [Said::Found {
                enabled: true,
                foreign: false
            }]
        );
        let (calls, said) = run(&mut rule, t0, (1, 120), |_| Some(0.0), agrees);
        assert_eq!(calls, [(40, Ask::Protect), (60, Ask::Clear)]);
        assert_eq!(
            said,
            [
                Said::Renewed,
                Said::Cleared {
                    quiet_for: Some(s(60.0))
                }
            ]
        );
        // One still needed is renewed in time: a minute after its predecessor set it.
        let mut rule = Rule::new(AFTER, MINUTE, Some(t0 + s(100.0)), t0);
        rule.answered(Ask::Read, t0, Answer::State { enabled: true }, t0, 0.0);
        let (calls, said) = run(&mut rule, t0, (1, 50), |t| Some(40.0 + t as f64), agrees);
        assert_eq!(
            (calls, said),
            (vec![(40, Ask::Protect)], vec![Said::Renewed])
        );
        // The read finds one the Board does not know of (the app's own, another
        // container's, an earlier run's): left alone, never cleared for nothing.
        let mut rule = Rule::new(AFTER, MINUTE, None, t0);
        let said = rule.answered(Ask::Read, t0, Answer::State { enabled: true }, t0, 0.0);
        assert_eq!(
            said,
            [Said::Found {
                enabled: true,
                foreign: true
            }]
        );
        assert_eq!(rule.protected_until(t0), None);
        let (calls, _) = run(&mut rule, t0, (1, 300), |_| Some(0.0), agrees);
        assert_eq!(calls, []);
        // A long request of its own sets one all the same (and clears it after).
        let (calls, _) = run(
            &mut rule,
            t0,
            (301, 500),
            |t| Some((t - 300) as f64),
            agrees,
        );
        assert_eq!(calls[0], (330, Ask::Protect));
    }

    #[test]
    fn a_read_that_fails_is_not_tried_again() {
        let t0 = Instant::now();
        let mut rule = Rule::new(AFTER, MINUTE, None, t0);
        let gone = Answer::Failed("connection refused".into());
        let said = rule.answered(Ask::Read, t0, gone, t0, 0.0);
        assert!(matches!(&said[..], [Said::Failing { ask: Ask::Read, .. }]));
        assert_eq!(rule.due(t0 + s(1.0)), None);
        let (calls, _) = run(&mut rule, t0, (1, 35), |t| Some(t as f64), agrees);
        assert_eq!(calls, [(30, Ask::Protect)]);
    }
}
