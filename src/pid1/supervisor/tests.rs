//! Supervision's turns against a scripted kernel: each wait hands the loop what one
//! wake of poll(2) would (signals read, children exited), and the fake records every
//! signal sent and every helper forked. No root, no child, no real signal.
use super::*;
use crate::board::HelperBoard;
use crate::kernel::{Descendant, ProcView, Received, Woke};
use crate::pid1::lifecycle::Config;
use crate::signal_names::{Rewrites, Signal, HUP, KILL, TERM};
use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;

const APP: i32 = 100;
/// A process the app left behind, in its group.
const LEFT: i32 = 150;
const HELPER: i32 = 200;

/// One wake of the loop.
#[derive(Default)]
struct Wake {
    signals: Vec<Signal>,
    /// (pid, raw wait status) of children that exited by this wake.
    exits: Vec<(i32, libc::c_int)>,
    /// Comes only once SIGTERM has been relayed to the app's group (until then
    /// the waits time out, as poll's would).
    after_relay: bool,
    /// The helper's app check gives this verdict (and rings supervision's bell).
    check: Option<bool>,
    /// Comes only once the ready port listens (until then the waits time out).
    after_open: bool,
}

fn code(n: i32) -> libc::c_int {
    n << 8
}

/// A wake on which `pid` has exited with the raw wait `status`.
fn exit_of(pid: i32, status: libc::c_int) -> Wake {
    Wake {
        exits: vec![(pid, status)],
        ..Default::default()
    }
}

/// A wake on which `signal` has come.
fn signal_of(signal: Signal) -> Wake {
    Wake {
        signals: vec![signal],
        ..Default::default()
    }
}

#[derive(Default)]
struct Fake {
    script: VecDeque<Wake>,
    pending: Vec<Signal>,
    exited: VecDeque<(i32, libc::c_int)>,
    /// Live processes below lifeguard, (pid, pgid); the helper too once forked.
    below: Vec<(i32, i32)>,
    sent: Vec<(i32, Signal)>,
    forks: Vec<i32>,
    /// What each wait was asked to sleep at most.
    timeouts: Vec<Option<Duration>>,
    /// Each change of the ready port (listening or not), with how many signals had
    /// been sent before it.
    ready: Vec<(bool, usize)>,
    /// The helper's handle on the Board (its app check's verdicts).
    board: Option<HelperBoard>,
    /// Walks of the descendants.
    walks: usize,
    /// /proc cannot tell lifeguard's children apart (another namespace's, none).
    blind: bool,
    /// How many listens of the ready port fail (the port taken), from the first.
    listen_fails: usize,
    /// Listens of the ready port that failed.
    listen_failed: usize,
}

impl Sys for Fake {
    fn wait(&mut self, _: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<Woke> {
        self.timeouts.push(timeout);
        if !self.pending.is_empty() {
            return Ok(Woke {
                signals: true,
                bell: false,
            });
        }
        let relayed = self.sent.contains(&(-APP, TERM));
        let open = self.ready.last().is_some_and(|(open, _)| *open);
        if self
            .script
            .front()
            .is_some_and(|w| (w.after_relay && !relayed) || (w.after_open && !open))
        {
            std::thread::sleep(timeout.expect("a relay is due"));
            return Ok(Woke::default());
        }
        let Some(wake) = self.script.pop_front() else {
            // The script is over: time passes until the next deadline, as poll's
            // timeout would; a loop with none would wait for ever.
            let timeout = timeout.expect("the loop would wait for ever");
            std::thread::sleep(timeout);
            return Ok(Woke::default());
        };
        self.pending.extend(wake.signals);
        for (pid, status) in wake.exits {
            self.die(pid, status);
        }
        if let (Some(passing), Some(board)) = (wake.check, &self.board) {
            board.set_check(passing);
        }
        Ok(Woke {
            signals: !self.pending.is_empty(),
            bell: wake.check.is_some(),
        })
    }
    fn wait_for_signal(&mut self, timeout: Option<Duration>) -> io::Result<Option<Received>> {
        let bell = Board::new().unwrap();
        let woke = self.wait(bell.supervisor_bell.fd(), timeout)?;
        if !woke.signals {
            return Ok(None);
        }
        let signal = self.pending.remove(0);
        Ok(Some(Received { signal, sender: 0 }))
    }
    fn pending(&self, signal: Signal) -> bool {
        self.pending.contains(&signal)
    }
    fn take_signals(&mut self, out: &mut Vec<Received>) -> io::Result<()> {
        out.extend(
            self.pending
                .drain(..)
                .map(|signal| Received { signal, sender: 0 }),
        );
        Ok(())
    }
    fn reap_one(&mut self) -> Reaped {
        match self.exited.pop_front() {
            Some((pid, status)) => Reaped::Child { pid, status },
            None if self.below.is_empty() => Reaped::NoChildren,
            None => Reaped::NoneExited,
        }
    }
    fn send(&mut self, target: i32, signal: Signal) -> io::Result<()> {
        self.sent.push((target, signal));
        // SIGKILL is the one signal whose effect the fake plays: the helper's
        // death, sent to its process group (the app and what it left do as their
        // script says).
        if signal == KILL && self.forks.contains(&-target) {
            self.die(-target, signal.0);
        }
        Ok(())
    }
    fn signal_everything(&mut self, signal: Signal) {
        self.sent.push((-1, signal));
    }
    fn descendants(&mut self, prune: &[i32]) -> Vec<Descendant> {
        self.walks += 1;
        self.below
            .iter()
            .filter(|(pid, _)| !prune.contains(pid))
            .map(|&(pid, pgid)| Descendant {
                pid,
                pgid,
                proc_pid: pid,
                zombie: false,
            })
            .collect()
    }
    fn children_besides(&mut self, besides: &[i32]) -> Option<bool> {
        (!self.blind).then(|| self.below.iter().any(|(pid, _)| !besides.contains(pid)))
    }
    fn proc_view(&self) -> ProcView {
        ProcView::Own
    }
    fn is_pid1(&self) -> bool {
        false
    }
    fn handles(&self, _: &Descendant, _: Signal) -> bool {
        true
    }
    fn app_stopped(&self, _: i32) -> Option<Signal> {
        None
    }
    fn stop_with_app(&mut self, _: i32) {}
    fn set_ready_port(&mut self, open: bool) -> io::Result<()> {
        if open && self.listen_failed < self.listen_fails {
            self.listen_failed += 1;
            return Err(io::Error::from_raw_os_error(libc::EADDRINUSE));
        }
        self.ready.push((open, self.sent.len()));
        Ok(())
    }
    fn helper_sched(&self, _: i32) -> Option<crate::kernel::Sched> {
        None
    }
    fn start_helper(&mut self, board: &Board) -> io::Result<i32> {
        let pid = HELPER + self.forks.len() as i32;
        self.forks.push(pid);
        self.below.push((pid, pid));
        board.for_helper()?.beat();
        Ok(pid)
    }
}

impl Fake {
    fn die(&mut self, pid: i32, status: libc::c_int) {
        if let Some(at) = self.below.iter().position(|(p, _)| *p == pid) {
            self.below.remove(at);
            self.exited.push_back((pid, status));
            // As the kernel does: SIGCHLD, which wakes the loop.
            self.pending.push(signal_names::CHLD);
        }
    }

    fn sent_to(&self, target: i32) -> Vec<Signal> {
        self.sent
            .iter()
            .filter(|(t, _)| *t == target)
            .map(|(_, s)| *s)
            .collect()
    }
}

fn config(drain_delay_ms: u64) -> Config {
    Config {
        drain_delay: Duration::from_millis(drain_delay_ms),
        grace: Duration::from_secs(10),
        rewrites: Rewrites::default(),
        remap_exit: vec![],
        group: true,
        drain_max: None,
        drain_quiet: Duration::from_millis(100),
        leftover_grace: Duration::from_secs(10),
        stop_signal: TERM,
    }
}

/// Runs the loop over `script` (the app, and `left` behind it in its group) until
/// it exits: the fake as it was left, and the exit code.
fn run(config: Config, left: bool, script: Vec<Wake>) -> (Fake, u8) {
    run_checked(config, left, false, script)
}

/// As `run`, with an app check (`check`): the app is ready once it passes.
fn run_checked(config: Config, left: bool, check: bool, script: Vec<Wake>) -> (Fake, u8) {
    run_with(config, left, check, true, script)
}

/// As `run_checked`; `helper`: whether a helper process is wanted at all.
fn run_with(
    config: Config,
    left: bool,
    check: bool,
    helper: bool,
    script: Vec<Wake>,
) -> (Fake, u8) {
    run_on(Fake::default(), config, left, check, helper, script)
}

/// As `run_with`, on a fake with settings of its own (`blind`, `listen_fails`).
fn run_on(
    fake: Fake,
    config: Config,
    left: bool,
    check: bool,
    helper: bool,
    script: Vec<Wake>,
) -> (Fake, u8) {
    let mut below = vec![(APP, APP)];
    if left {
        below.push((LEFT, APP));
    }
    let board = Board::new().unwrap();
    let fake = Fake {
        script: script.into(),
        below,
        board: Some(board.for_helper().unwrap()),
        ..fake
    };
    let fake = std::rc::Rc::new(std::cell::RefCell::new(fake));
    let supervisor = Supervisor {
        sys: Shared(fake.clone()),
        lifecycle: Lifecycle::new(config),
        keeper: Keeper::new(helper, false, Instant::now()),
        app_check: check,
        app_pid: APP,
        warn_on_reap: false,
        board,
        terminal: AppTerminal::None,
        last_look: None,
        senders: Default::default(),
        me: 1,
        inflight_port: None,
        ready_port: Some(9596),
        scale_in_protection: false,
        ready_open: false,
        ready_retry: None,
        woke_late: Duration::ZERO,
        told_own_signal: false,
        helper_sched: None,
        spared_since: None,
        starved_from: None,
    };
    let code = supervisor.run();
    let fake = std::mem::take(&mut *fake.borrow_mut());
    (fake, code)
}

/// The fake, kept by the test while the supervisor owns its handle.
struct Shared(std::rc::Rc<std::cell::RefCell<Fake>>);

impl Sys for Shared {
    fn wait(&mut self, b: BorrowedFd<'_>, t: Option<Duration>) -> io::Result<Woke> {
        self.0.borrow_mut().wait(b, t)
    }
    fn wait_for_signal(&mut self, t: Option<Duration>) -> io::Result<Option<Received>> {
        self.0.borrow_mut().wait_for_signal(t)
    }
    fn pending(&self, signal: Signal) -> bool {
        self.0.borrow().pending(signal)
    }
    fn take_signals(&mut self, out: &mut Vec<Received>) -> io::Result<()> {
        self.0.borrow_mut().take_signals(out)
    }
    fn reap_one(&mut self) -> Reaped {
        self.0.borrow_mut().reap_one()
    }
    fn send(&mut self, target: i32, signal: Signal) -> io::Result<()> {
        self.0.borrow_mut().send(target, signal)
    }
    fn signal_everything(&mut self, signal: Signal) {
        self.0.borrow_mut().signal_everything(signal)
    }
    fn descendants(&mut self, prune: &[i32]) -> Vec<Descendant> {
        self.0.borrow_mut().descendants(prune)
    }
    fn children_besides(&mut self, besides: &[i32]) -> Option<bool> {
        self.0.borrow_mut().children_besides(besides)
    }
    fn proc_view(&self) -> ProcView {
        self.0.borrow().proc_view()
    }
    fn is_pid1(&self) -> bool {
        self.0.borrow().is_pid1()
    }
    fn handles(&self, d: &Descendant, s: Signal) -> bool {
        self.0.borrow().handles(d, s)
    }
    fn app_stopped(&self, app: i32) -> Option<Signal> {
        self.0.borrow().app_stopped(app)
    }
    fn stop_with_app(&mut self, app: i32) {
        self.0.borrow_mut().stop_with_app(app)
    }
    fn helper_sched(&self, pid: i32) -> Option<crate::kernel::Sched> {
        self.0.borrow().helper_sched(pid)
    }
    fn start_helper(&mut self, board: &Board) -> io::Result<i32> {
        self.0.borrow_mut().start_helper(board)
    }
    fn set_ready_port(&mut self, open: bool) -> io::Result<()> {
        self.0.borrow_mut().set_ready_port(open)
    }
}

#[test]
fn a_signal_and_the_apps_exit_in_one_wake_relay_first_then_reap() {
    // SIGTERM with no drain delay and the app's exit, read in the same wake: the
    // signal is the running app's (its pid not yet reaped, so not reusable), so it
    // goes to the group before the reap; then the exit code is the app's.
    let (fake, code) = run(
        config(0),
        false,
        vec![Wake {
            signals: vec![TERM],
            exits: vec![(APP, code(3))],
            ..Default::default()
        }],
    );
    assert_eq!(code, 3);
    assert_eq!(fake.sent_to(-APP), vec![TERM, signal_names::CONT]);
    // The helper was forked once, and let go (killed: nothing to publish).
    assert_eq!(fake.forks, vec![HELPER]);
    assert_eq!(fake.sent_to(-HELPER), vec![KILL]);
}

#[test]
fn a_signal_after_the_apps_exit_goes_to_what_is_left_of_its_group_alone() {
    // The app is reaped first; its pid (and group id) may be reused: a HUP then
    // reaches the members still running one by one, never -pgid.
    let (fake, code) = run(
        config(0),
        true,
        vec![
            exit_of(APP, code(0)),
            signal_of(HUP),
            exit_of(LEFT, code(0)),
        ],
    );
    assert_eq!(code, 0);
    assert!(fake.sent_to(LEFT).contains(&HUP), "{:?}", fake.sent);
    assert!(!fake.sent_to(-APP).contains(&HUP), "{:?}", fake.sent);
    assert!(!fake.sent_to(HELPER).contains(&HUP), "{:?}", fake.sent);
    assert!(!fake.sent_to(-HELPER).contains(&HUP), "{:?}", fake.sent);
}

#[test]
fn the_drain_delay_holds_the_relay_and_the_helper_is_never_signalled_but_killed() {
    let (fake, code) = run(
        config(30),
        false,
        vec![
            Wake {
                signals: vec![TERM, HUP],
                ..Default::default()
            },
            Wake {
                exits: vec![(APP, code(0))],
                after_relay: true,
                ..Default::default()
            },
        ],
    );
    // The loop slept to the drain's end (no wake-up before), relayed, and the app
    // exited on it.
    assert_eq!(code, 0);
    let to_app = fake.sent_to(-APP);
    assert_eq!(
        &to_app[..3],
        &[HUP, TERM, signal_names::CONT],
        "{:?}",
        fake.sent
    );
    assert!(fake.timeouts[1].is_some_and(|t| t <= Duration::from_millis(30)));
    // Forwarding never reaches the helper; it is killed once the app is gone.
    assert_eq!(fake.sent_to(-HELPER), vec![KILL]);
}

#[test]
fn a_stop_while_the_helper_is_down_goes_on_and_never_restarts_it_after_the_exit() {
    let (fake, code) = run(
        config(0),
        false,
        vec![
            // The helper dies (a segfault), then SIGTERM comes before its restart.
            exit_of(HELPER, libc::SIGSEGV),
            signal_of(TERM),
            exit_of(APP, code(0)),
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(fake.sent_to(-APP), vec![TERM, signal_names::CONT]);
    assert_eq!(
        fake.forks,
        vec![HELPER],
        "not restarted after the app's exit"
    );
}

#[test]
fn the_ready_port_listens_once_ready_and_a_sigterm_closes_it_before_anything_is_sent() {
    // No app check: ready at once. The SIGTERM's turn (no drain delay, so the relay
    // comes in the same turn) closes the port before the first kill(2).
    let (fake, code) = run(
        config(0),
        false,
        vec![signal_of(TERM), exit_of(APP, code(0))],
    );
    assert_eq!(code, 0);
    assert_eq!(fake.ready, vec![(true, 0), (false, 0)], "{:?}", fake.sent);
    assert_eq!(fake.sent_to(-APP), vec![TERM, signal_names::CONT]);
}

#[test]
fn the_ready_port_follows_the_app_check_and_closes_when_the_app_exits() {
    let verdict = |passing| Wake {
        check: Some(passing),
        ..Default::default()
    };
    let (fake, code) = run_checked(
        config(0),
        false,
        true,
        vec![
            // Not ready until the check passes; then it follows each verdict.
            verdict(false),
            verdict(true),
            verdict(false),
            verdict(true),
            exit_of(APP, code(4)),
        ],
    );
    assert_eq!(code, 4);
    let changes: Vec<bool> = fake.ready.iter().map(|(open, _)| *open).collect();
    assert_eq!(changes, vec![true, false, true, false]);
}

#[test]
fn the_deadline_kills_each_leftover_once_and_stops_walking_when_nothing_is_new() {
    // A subreaper (the fake is not PID 1): the app ignores the relayed SIGTERM, the
    // deadline kills it and what it left; the second walk finds nobody new.
    let config = Config {
        grace: Duration::from_millis(200),
        ..config(0)
    };
    let (fake, code) = run(config, true, vec![signal_of(TERM)]);
    assert_eq!(code, 137);
    assert_eq!(fake.sent_to(APP), vec![KILL]);
    assert_eq!(fake.sent_to(LEFT), vec![KILL]);
    assert!(fake.walks <= 3, "{} walks", fake.walks);
}

#[test]
fn with_no_helper_the_loop_takes_each_signal_in_its_wait_and_relays_it() {
    // No helper wanted: nothing rings the bell or reads readiness, so the wait is
    // one that takes the signal itself (rt_sigtimedwait); several pending come one
    // per wait, in order.
    let (fake, code) = run_with(
        config(0),
        false,
        false,
        false,
        vec![
            Wake {
                signals: vec![HUP, TERM],
                ..Default::default()
            },
            exit_of(APP, code(0)),
        ],
    );
    assert_eq!(code, 0);
    assert!(fake.forks.is_empty());
    assert_eq!(
        fake.sent_to(-APP),
        vec![HUP, TERM, signal_names::CONT],
        "{:?}",
        fake.sent
    );
}

#[test]
fn where_proc_cannot_tell_the_helper_from_the_apps_leftovers_the_helper_is_not_waited_for() {
    // A /proc of another namespace without child lists, or none: the kernel's count of
    // children includes the helper. It goes at the app's exit, and lifeguard exits
    // with the app's code long before the grace deadline (10 s here).
    let began = Instant::now();
    let fake = Fake {
        blind: true,
        ..Default::default()
    };
    let (fake, code) = run_on(
        fake,
        config(0),
        false,
        false,
        true,
        vec![exit_of(APP, code(3))],
    );
    assert_eq!(code, 3);
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "waited {:?}",
        began.elapsed()
    );
    assert!(fake.sent_to(-HELPER).contains(&KILL), "{:?}", fake.sent);
}

#[test]
fn a_ready_port_whose_listen_fails_is_never_recorded_open_and_is_tried_again() {
    // The port taken by another socket: two listens fail, a second apart; the third
    // opens it. Until then the Board says it cannot listen (/readyz not ready).
    let fake = Fake {
        listen_fails: 2,
        ..Default::default()
    };
    let began = Instant::now();
    let (fake, code) = run_on(
        fake,
        config(0),
        false,
        false,
        true,
        vec![
            Wake {
                signals: vec![TERM],
                after_open: true,
                ..Default::default()
            },
            exit_of(APP, code(0)),
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(fake.listen_failed, 2);
    assert_eq!(fake.ready, vec![(true, 0), (false, 0)]);
    let took = began.elapsed();
    assert!(took >= Duration::from_secs(2), "retried after {took:?}");
}

#[test]
fn a_failed_listen_tells_readiness_the_port_cannot_listen() {
    let board = Board::new().unwrap();
    let helper = board.for_helper().unwrap();
    board.set_ready_port_failing();
    assert!(helper.ready_port_failing() && !helper.ready_port_open());
    board.set_ready_port(true);
    assert!(!helper.ready_port_failing() && helper.ready_port_open());
}

#[test]
fn a_silent_helper_is_starved_only_while_its_thread_waits_to_run_without_spinning() {
    use super::helper_process::starved_not_hung;
    use crate::kernel::Sched;
    let at = |ran_ms: u64, waited_ms: u64, runnable: bool| Sched {
        ran: Duration::from_millis(ran_ms),
        waited: Duration::from_millis(waited_ms),
        runnable,
    };
    let then = Instant::now();
    let now = then + Duration::from_secs(2);
    for (before, sched, starved, why) in [
        (None, at(5, 9_000, true), true, "waiting to run, first look"),
        (
            Some((7, at(5, 9_000, true), then)),
            at(11, 10_000, true),
            true,
            "ran 6 ms in a look: starved",
        ),
        (
            Some((7, at(5, 9_000, true), then)),
            at(1_500, 9_000, true),
            false,
            "ran 1.5 s: spinning",
        ),
        (
            Some((8, at(5, 9_000, true), then)),
            at(1_500, 9_000, true),
            true,
            "another helper's figures say nothing",
        ),
        (
            None,
            at(5, 9_000, false),
            false,
            "asleep, blocked or stopped: hung",
        ),
        (
            Some((7, at(5, 9_000, false), then)),
            at(8, 10_500, false),
            true,
            "asleep now, but 1.5 s of the 2 s waiting its turn: starved",
        ),
        (
            Some((7, at(5, 9_000, false), then)),
            at(8, 9_010, false),
            false,
            "woke now and then, hardly ever waiting for the CPU: hung",
        ),
    ] {
        assert_eq!(starved_not_hung(7, before, sched, now), starved, "{why}");
    }
}
