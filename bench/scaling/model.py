"""The scaling benchmark's rules: CloudWatch's alarms and Application Auto Scaling's step
scaling as documented, as pure functions over the data the emulator holds.

Used twice: live, by the autoscaler that scales the real fleet on lifeguard's data
(run.py), and afterwards, to replay the held fleet's data through each signal model and
find when it would have decided. The settings mirror examples/ecs/scaling.yaml (the
values that differ for this 2-core machine are set by run.py and listed in
bench/README.md).

The rules, in short:
- A datapoint of period P is every raw value whose timestamp falls in [k*P, (k+1)*P),
  periods aligned to the clock as CloudWatch aligns them. Its p50 is the nearest rank
  over all tasks' values together (the alarms' dimensions are the service's, so every
  task publishes into the same metric): the smallest value with at least 50 % of the
  points at or below it, as tests/support/cloudwatch_front.py's /_percentile computes it.
- A signal's datapoint reaches its alarm `lag` seconds after its period ends (0 for
  lifeguard's own data, published as it is sampled; 180 s for AWS's built-in 1-minute
  metrics, as measured), and the alarm is evaluated `EVAL_DELAY` after that.
- An alarm with one datapoint to alarm is in ALARM while its latest datapoint breaches;
  the low alarm needs its last N datapoints to breach; a missing datapoint never
  breaches (TreatMissingData: notBreaching).
- An alarm's Auto Scaling action runs when it goes into ALARM and again each
  `reinvoke` seconds (a minute on AWS) while it stays there.
- PercentChangeInCapacity rounds as Application Auto Scaling does (tests/examples.rs
  checks the same arithmetic against AWS's examples), then MinAdjustmentMagnitude.
- Cooldown: a scale-out during the cooldown of a previous scale-out counts the capacity
  that one added (only a larger scale-out acts); a scale-in waits out the cooldown of
  the last scaling activity; a scale-out is never held back by a scale-in's cooldown.
"""
import math

# Seconds after a datapoint becomes available at which its alarm is evaluated:
# CloudWatch evaluates a 10-second alarm every 10 s; the second lets the last datum of
# the period arrive (lifeguard's datums are stamped when they are sent).
EVAL_DELAY = 1.0


def nearest_rank(points, p=50.0):
    """pNN of (value, count) pairs: the smallest value with at least p % of the points
    at or below it; None without points."""
    pts = sorted((v, c) for v, c in points if c > 0)
    total = sum(c for _, c in pts)
    if total == 0:
        return None
    rank = max(1, math.ceil(total * p / 100.0))
    seen = 0
    for v, c in pts:
        seen += c
        if seen >= rank:
            return v
    return pts[-1][0]


def period_start(t, period, offset=0.0):
    """The start of the period holding t; periods start at k * period + offset (0 on
    AWS; other offsets replay the same data as if the step had come at another moment
    against the period boundaries)."""
    return math.floor((t - offset) / period) * period + offset


def raw_points(datum):
    """(value, count) pairs of one emulator datum (raw Values/Counts, or a Value)."""
    if datum.get("values") is not None:
        counts = datum.get("counts") or [1] * len(datum["values"])
        return list(zip(datum["values"], counts))
    if datum.get("value") is not None:
        return [(datum["value"], 1)]
    return []


class Series:
    """One metric of one service as the emulator holds it: (timestamp, value, count)."""

    def __init__(self, points=()):
        self.points = sorted(points)

    @classmethod
    def from_data(cls, data, service, metric):
        pts = []
        for d in data:
            if d.get("name") != metric or (d.get("dimensions") or {}).get("ServiceName") != service:
                continue
            for v, c in raw_points(d):
                pts.append((d["timestamp"], float(v), float(c)))
        return cls(pts)

    def datapoint(self, start, period, p=50.0):
        """The period's pNN, None when it holds no value."""
        return nearest_rank([(v, c) for t, v, c in self.points if start <= t < start + period], p)


def percent_change(current, percent, min_magnitude):
    """Application Auto Scaling's PercentChangeInCapacity: above 1 down, between 0 and 1
    to 1, between -1 and 0 to -1, below -1 up (towards zero); then at least
    MinAdjustmentMagnitude either way."""
    raw = current * percent / 100.0
    if raw >= 1.0:
        r = math.floor(raw)
    elif raw > 0.0:
        r = 1
    elif -1.0 < raw < 0.0:
        r = -1
    else:
        r = math.ceil(raw)
    if r != 0 and abs(r) < min_magnitude:
        r = int(math.copysign(min_magnitude, r))
    return int(r)


class Target:
    """An ECS service's scalable target under step scaling (desired count, bounds,
    cooldowns). `activities` lists every change: (time, policy, from, to)."""

    def __init__(self, minimum, maximum, desired, cooldown, out_percent=200, in_percent=-25, min_magnitude=1):
        self.min, self.max, self.desired = minimum, maximum, desired
        self.cooldown = cooldown
        self.out_percent, self.in_percent, self.min_magnitude = out_percent, in_percent, min_magnitude
        self.last_out = None  # (time, capacity before it)
        self.last_activity = None
        self.activities = []

    def clamp(self, n):
        return max(self.min, min(self.max, n))

    def scale_out(self, now, percent=None):
        """A scale-out policy runs (`percent` its step, the target's own by default: the
        saturated step's 400 comes this way); returns the new desired count, or None
        (no change)."""
        in_cooldown = self.last_out is not None and now < self.last_out[0] + self.cooldown
        # During the cooldown the capacity the last scale-out added counts as already
        # there: the step is computed from the capacity before it, and only a larger
        # result adds more.
        base = self.last_out[1] if in_cooldown else self.desired
        step = self.out_percent if percent is None else percent
        want = self.clamp(base + percent_change(base, step, self.min_magnitude))
        if want <= self.desired:
            return None
        self.activities.append((now, "ScaleOut", self.desired, want))
        self.last_out = (now, base)
        self.last_activity = now
        self.desired = want
        return want

    def scale_in(self, now):
        """The scale-in policy runs; returns the new desired count, or None (no change,
        or held back by the cooldown)."""
        if self.last_activity is not None and now < self.last_activity + self.cooldown:
            return None
        want = self.clamp(self.desired + percent_change(self.desired, self.in_percent, self.min_magnitude))
        if want >= self.desired:
            return None
        self.activities.append((now, "ScaleIn", self.desired, want))
        self.last_activity = now
        self.desired = want
        return want


class Alarm:
    """One CloudWatch metric alarm with an Auto Scaling action."""

    def __init__(self, name, metric, threshold, high, periods, policy, reinvoke):
        self.name, self.metric, self.threshold, self.high = name, metric, threshold, high
        self.periods, self.policy, self.reinvoke = periods, policy, reinvoke
        self.state = "OK"
        self.last_invoked = None
        self.history = []  # (time, state, the datapoints behind it)

    def breaches(self, value):
        if value is None:
            return False  # notBreaching
        return value >= self.threshold if self.high else value <= self.threshold

    def evaluate(self, now, latest):
        """`latest`: the alarm's last `periods` datapoints, oldest first. Returns True
        when the action runs now (the transition into ALARM, or a repeat)."""
        alarm = len(latest) == self.periods and all(self.breaches(v) for v in latest)
        new = "ALARM" if alarm else "OK"
        if new != self.state:
            self.state = new
            self.history.append((now, new, list(latest)))
            if new == "ALARM":
                self.last_invoked = now
                return True
            return False
        if self.state == "ALARM" and now >= self.last_invoked + self.reinvoke - 0.001:
            self.last_invoked = now
            return True
        return False


class Signal:
    """One signal model: its datapoints' period and lag, and which metrics' high alarms
    it feeds (the scale-out decision; a low side only for lifeguard's live loop)."""

    def __init__(self, key, label, period, lag, metrics):
        self.key, self.label, self.period, self.lag, self.metrics = key, label, period, lag, metrics

    def first_breach(self, series, thresholds, t_from, t_to, offset=0.0):
        """Replays the data: the first period ending after t_from whose datapoint
        breaches a high alarm, with when it reaches the alarm (`available`), when the
        alarm fires (`alarm`), and the values. None if none does before t_to."""
        start = period_start(t_from, self.period, offset)
        while start < t_to:
            end = start + self.period
            values = {m: series[m].datapoint(start, self.period) for m in self.metrics}
            hits = [m for m in self.metrics if values[m] is not None and values[m] >= thresholds[m]]
            if hits and end > t_from:
                available = end + self.lag
                return {
                    "period_start": start,
                    "period_end": end,
                    "available": available,
                    "alarm": available + EVAL_DELAY,
                    "metrics": hits,
                    "values": values,
                }
            start = end
        return None

    def datapoints(self, series, metric, t_from, t_to):
        """Every datapoint in [t_from, t_to): (period start, period end, available, value)."""
        out = []
        start = period_start(t_from, self.period)
        while start < t_to:
            v = series[metric].datapoint(start, self.period)
            out.append((start, start + self.period, start + self.period + self.lag, v))
            start += self.period
        return out
