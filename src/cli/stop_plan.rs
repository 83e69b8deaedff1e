//! The stop plan: where lifeguard runs (the engine, seen once at start) and what the
//! user gave (`--drain-delay`, `--drain-max`, `--grace`, by flag or variable) decide
//! the drain delay, the drain's end and the grace deadline, and the start's notices
//! about them. Pure: the facts come in as values, so every cell of the table is a test.
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::seconds::human;
use crate::settings::{Engine, ORCHESTRATOR_VARIABLES};

/// Where lifeguard runs, from what it sees at start: an orchestrator's variables (ECS's
/// metadata endpoint, Kubernetes' service environment: they stop containers with
/// timeouts of their own, whatever engine runs underneath), or, as PID 1, the file a
/// plain engine writes into every container (Docker `/.dockerenv`, Podman
/// `/run/.containerenv`). Not PID 1 (a subreaper in someone's container, a shell),
/// lifeguard is not what a plain engine stops. The one place the engine is decided.
pub fn engine(
    pid1: bool,
    written: fn(&str) -> bool,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Option<Engine> {
    let set = |name: &str| lookup(name).is_some_and(|v| !v.trim().is_empty());
    let [ecs_v4, ecs, kubernetes] = ORCHESTRATOR_VARIABLES;
    if set(ecs_v4) || set(ecs) {
        Some(Engine::Ecs)
    } else if set(kubernetes) {
        Some(Engine::Kubernetes)
    } else if pid1 && written("/.dockerenv") {
        Some(Engine::Docker)
    } else if pid1 && written("/run/.containerenv") {
        Some(Engine::Podman)
    } else {
        None
    }
}

/// What the user gave, by flag or variable; None where they gave nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Given {
    pub delay: Option<Duration>,
    pub max: Option<Duration>,
    pub grace: Option<Duration>,
}

/// The stop lifeguard runs: the drain delay, the drain's end (`--drain-max`) and the
/// grace deadline, all from the SIGTERM; and lines for the start that say what was
/// chosen for the user and what the engine's own stop will cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopPlan {
    pub delay: Duration,
    pub max: Duration,
    pub grace: Duration,
    pub notices: Vec<String>,
}

/// The defaults where nothing else is known, and under ECS and Kubernetes: traffic stops
/// coming some seconds after the SIGTERM (the balancer's deregistration, the endpoint
/// controller), and their stop timeouts are 30 s by default.
const DELAY: Duration = Duration::from_secs(5);
const GRACE: Duration = Duration::from_secs(25);

/// Under a plain engine: no drain delay (nothing routes traffic to the container by its
/// readiness, so there is nobody to wait for), and a grace that ends before the
/// engine's SIGKILL, so lifeguard's deadline, line and exit code end the stop.
const PLAIN_GRACE: Duration = Duration::from_secs(9);

/// `docker stop` and `podman stop` send SIGKILL this long after their SIGTERM, unless
/// the container was started with a longer stop timeout.
const ENGINE_STOP_WINDOW: Duration = Duration::from_secs(10);

/// What a grace the user did not give leaves the app after a drain they did give that
/// the default grace cannot hold: as the default plan leaves it (a 15 s drain at most,
/// 25 s of grace).
const AFTER_THE_DRAIN: Duration = Duration::from_secs(10);

/// The stop plan for `given` under `engine`.
///
/// What the user gave always stays; the defaults of what they did not give fit around
/// it: the grace is the engine's default where the drain they asked for ends before it,
/// else long enough for that drain and the app's exit after it; the drain delay is the
/// default, lowered to a drain's end they gave below it, or a fifth of a grace they
/// lowered to the default delay or below. A refusal is left only for values the user
/// gave that contradict each other.
pub fn stop_plan(engine: Option<Engine>, given: Given) -> Result<StopPlan, String> {
    let plain = engine.is_some_and(Engine::plain);
    let (default_delay, default_grace) = if plain {
        (Duration::ZERO, PLAIN_GRACE)
    } else {
        (DELAY, GRACE)
    };
    let delay = given.delay.unwrap_or_else(|| {
        let mut delay = default_delay;
        if let Some(max) = given.max {
            delay = delay.min(max);
        }
        if let Some(grace) = given.grace.filter(|grace| *grace <= default_delay) {
            delay = delay.min(grace / 5);
        }
        delay
    });
    let drain_end = given.max.unwrap_or(delay).max(delay);
    let extended = given.grace.is_none() && drain_end >= default_grace;
    let grace = match given.grace {
        Some(grace) => grace,
        None if extended => drain_end + AFTER_THE_DRAIN,
        None => default_grace,
    };
    if grace <= delay {
        let default = |given: Option<Duration>| if given.is_none() { ", the default" } else { "" };
        return Err(format!(
            "--grace ({}{}) must be longer than --drain-delay ({}{}): the grace deadline \
             includes the drain; give both, e.g. --drain-delay 5s --grace 25s",
            human(grace),
            default(given.grace),
            human(delay),
            default(given.delay),
        ));
    }
    // Halfway from the drain delay to the grace deadline, so the app keeps time to shut
    // down before the SIGKILL.
    let max = given.max.unwrap_or(delay + grace.saturating_sub(delay) / 2);
    if max < delay || max >= grace {
        return Err(format!(
            "--drain-max ({}) must be at least --drain-delay ({}) and shorter than --grace ({})",
            human(max),
            human(delay),
            human(grace)
        ));
    }
    let mut notices = Vec::new();
    if let Some(engine) = engine.filter(|e| e.plain()) {
        notices.extend(plain_defaults(engine, given, delay, grace, extended));
        if grace >= ENGINE_STOP_WINDOW {
            notices.push(stop_window(engine, grace));
        }
    }
    Ok(StopPlan {
        delay,
        max,
        grace,
        notices,
    })
}

/// The line that says which defaults a plain engine chose, if it chose any.
fn plain_defaults(
    engine: Engine,
    given: Given,
    delay: Duration,
    grace: Duration,
    extended: bool,
) -> Option<String> {
    // Built piece by piece rather than by a format! per case: the build without the SDK
    // has bytes to spare for none of them.
    let mut chosen = String::new();
    let mut say = |flag: &str, value: Duration| {
        if !chosen.is_empty() {
            chosen.push_str(", ");
        }
        chosen.push_str(flag);
        chosen.push_str(&human(value).to_string());
    };
    if given.delay.is_none() && given.max.is_none() {
        say("--drain-delay ", delay);
    }
    if given.grace.is_none() {
        say("--grace ", grace);
        if extended {
            match given.max {
                Some(max) => say("to hold the --drain-max ", max),
                None => say("to hold the --drain-delay ", delay),
            }
            chosen.push_str(" given");
        }
    }
    if chosen.is_empty() {
        return None;
    }
    Some(format!(
        "defaults for a plain {} container (no ECS or Kubernetes variables): {chosen}: \
         nothing routes to it by readiness, and `{} stop` sends SIGKILL at 10s; give the \
         flags (or their LIFEGUARD_* twins) to choose others",
        engine.name(),
        engine.command(),
    ))
}

/// The line that says the engine's own stop comes before the grace deadline, and how
/// to give the container a longer one (lifeguard cannot see the one it was given).
fn stop_window(engine: Engine, grace: Duration) -> String {
    let enough = (grace + Duration::from_secs(5)).as_secs();
    let compose = if engine == Engine::Podman {
        String::new()
    } else {
        format!(", or in compose stop_grace_period: {enough}s")
    };
    format!(
        "reminder, under {}: `{cmd} stop` sends SIGKILL 10s after its SIGTERM unless the \
         container was started with a longer stop timeout, which lifeguard cannot see from \
         inside; this stop's grace is {}, so give it {enough}s or more ({cmd} run \
         --stop-timeout {enough}{compose}), or lower --grace",
        engine.name(),
        human(grace),
        cmd = engine.command(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    /// The table the docs give (docs/reference.md, "The stop plan"): engine × what was
    /// given → (drain delay, drain max, grace), or the refusal's start.
    #[test]
    fn every_engine_and_every_given_set_has_its_plan() {
        type Cell = (Option<Engine>, Given, Result<(f64, f64, f64), &'static str>);
        let given = |delay: Option<f64>, max: Option<f64>, grace: Option<f64>| Given {
            delay: delay.map(s),
            max: max.map(s),
            grace: grace.map(s),
        };
        let nothing = given(None, None, None);
        let delay20 = given(Some(20.0), None, None);
        let max15 = given(None, Some(15.0), None);
        let grace30 = given(None, None, Some(30.0));
        let delay2_grace8 = given(Some(2.0), None, Some(8.0));
        let short_grace = given(None, None, Some(3.0));
        let contradiction = given(Some(20.0), None, Some(10.0));
        let max_past_grace = given(None, Some(12.0), Some(10.0));
        let mut table: Vec<Cell> = Vec::new();
        for general in [None, Some(Engine::Ecs), Some(Engine::Kubernetes)] {
            table.extend([
                (general, nothing, Ok((5.0, 15.0, 25.0))),
                // Fits in the default grace: 0.2.0's plan, unchanged.
                (general, delay20, Ok((20.0, 22.5, 25.0))),
                (general, max15, Ok((5.0, 15.0, 25.0))),
                (general, grace30, Ok((5.0, 17.5, 30.0))),
                (general, delay2_grace8, Ok((2.0, 5.0, 8.0))),
                (general, short_grace, Ok((0.6, 1.8, 3.0))),
                // A drain the default grace cannot hold: the grace follows it.
                (
                    general,
                    given(Some(30.0), None, None),
                    Ok((30.0, 35.0, 40.0)),
                ),
                (
                    general,
                    given(None, Some(40.0), None),
                    Ok((5.0, 40.0, 50.0)),
                ),
                (general, given(None, Some(2.0), None), Ok((2.0, 2.0, 25.0))),
                (general, contradiction, Err("--grace (10s) must be longer")),
                (general, max_past_grace, Err("--drain-max (12s) must be")),
            ]);
        }
        for plain in [Some(Engine::Docker), Some(Engine::Podman)] {
            table.extend([
                (plain, nothing, Ok((0.0, 4.5, 9.0))),
                // The ECS-tuned image on a laptop: it starts, with a grace for its drain.
                (plain, delay20, Ok((20.0, 25.0, 30.0))),
                (plain, max15, Ok((0.0, 15.0, 25.0))),
                (plain, given(None, Some(5.0), None), Ok((0.0, 5.0, 9.0))),
                (plain, grace30, Ok((0.0, 15.0, 30.0))),
                (plain, delay2_grace8, Ok((2.0, 5.0, 8.0))),
                (plain, short_grace, Ok((0.0, 1.5, 3.0))),
                (plain, given(Some(5.0), None, None), Ok((5.0, 7.0, 9.0))),
                (plain, contradiction, Err("--grace (10s) must be longer")),
                (plain, max_past_grace, Err("--drain-max (12s) must be")),
            ]);
        }
        for (engine, given, want) in table {
            let got = stop_plan(engine, given);
            match (want, &got) {
                (Ok((delay, max, grace)), Ok(plan)) => assert_eq!(
                    (plan.delay, plan.max, plan.grace),
                    (s(delay), s(max), s(grace)),
                    "{engine:?} {given:?}"
                ),
                (Err(start), Err(message)) => {
                    assert!(
                        message.starts_with(start),
                        "{engine:?} {given:?}: {message}"
                    )
                }
                (want, got) => panic!("{engine:?} {given:?}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn a_plain_engine_says_its_defaults_and_a_stop_window_shorter_than_the_plan() {
        let notices = |engine, given| stop_plan(Some(engine), given).unwrap().notices;
        // Nothing given: the defaults, within docker stop's 10 s; no reminder.
        let plain = notices(Engine::Docker, Given::default());
        assert_eq!(plain.len(), 1, "{plain:?}");
        assert!(
            plain[0].starts_with("defaults for a plain Docker container")
                && plain[0].contains("--drain-delay 0s, --grace 9s"),
            "{plain:?}"
        );
        // A drain given that 9 s cannot hold: kept, the grace fitted around it, and how
        // to give the container the stop window the plan needs.
        let tuned = notices(
            Engine::Docker,
            Given {
                delay: Some(s(20.0)),
                ..Given::default()
            },
        );
        assert_eq!(tuned.len(), 2, "{tuned:?}");
        assert!(
            tuned[0].contains("--grace 30s, to hold the --drain-delay 20s given")
                && !tuned[0].contains("--drain-delay 0"),
            "{tuned:?}"
        );
        assert!(
            tuned[1].starts_with("reminder, under Docker: `docker stop` sends SIGKILL 10s")
                && tuned[1].contains("docker run --stop-timeout 35")
                && tuned[1].contains("stop_grace_period: 35s"),
            "{tuned:?}"
        );
        // Everything given: nothing chosen, only the window.
        let all = notices(
            Engine::Podman,
            Given {
                delay: Some(s(1.0)),
                max: Some(s(2.0)),
                grace: Some(s(25.0)),
            },
        );
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(
            all[0].starts_with("reminder, under Podman: `podman stop`")
                && all[0].contains("podman run --stop-timeout 30"),
            "{all:?}"
        );
        // ECS, Kubernetes and no engine: their own stop timeouts; nothing to say.
        for engine in [Engine::Ecs, Engine::Kubernetes] {
            assert!(notices(engine, Given::default()).is_empty());
        }
        assert!(stop_plan(None, Given::default())
            .unwrap()
            .notices
            .is_empty());
    }

    #[test]
    fn the_engine_is_the_orchestrator_first_then_the_plain_engine_of_pid_1() {
        let vars = |set: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                set.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let docker: fn(&str) -> bool = |path| path == "/.dockerenv";
        let podman: fn(&str) -> bool = |path| path == "/run/.containerenv";
        assert_eq!(engine(true, docker, &vars(&[])), Some(Engine::Docker));
        assert_eq!(engine(true, podman, &vars(&[])), Some(Engine::Podman));
        // Not PID 1: not what the engine stops.
        assert_eq!(engine(false, docker, &vars(&[])), None);
        assert_eq!(engine(true, |_| false, &vars(&[])), None);
        // ECS on EC2 runs Docker; a pod may run on a Docker node.
        let ecs = vars(&[("ECS_CONTAINER_METADATA_URI_V4", "http://169.254.170.2/v4/x")]);
        assert_eq!(engine(true, docker, &ecs), Some(Engine::Ecs));
        let k8s = vars(&[("KUBERNETES_SERVICE_HOST", "10.96.0.1")]);
        assert_eq!(engine(true, docker, &k8s), Some(Engine::Kubernetes));
        // Set but blank is unset (`ENV KUBERNETES_SERVICE_HOST=` in an image).
        let blank = vars(&[("KUBERNETES_SERVICE_HOST", " ")]);
        assert_eq!(engine(true, docker, &blank), Some(Engine::Docker));
    }
}
