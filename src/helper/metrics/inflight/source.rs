//! `InFlightSource`: the sampler's in-flight reader, opened at first use and again after
//! a failure, one warning per outage; and the look that does without the
//! established-socket walk while the namespace is quiet (quiet.rs).
#![forbid(unsafe_code)]

use super::super::netstat;
use super::quiet;
use crate::logging;
use crate::sock_diag::count::{InFlight, SockRecord};
use crate::sock_diag::listening;
use crate::sock_diag::reader::InFlightReader;

/// The in-flight reader, opened at first use and again after a failure; one warning
/// per outage. The sampler owns the one there is: the hold reads its figures.
pub struct InFlightSource {
    port: u16,
    reader: Option<InFlightReader>,
    failing: bool,
    /// The last full dump, while the namespace stays quiet (quiet.rs).
    quiet: Option<quiet::Baseline>,
    /// The last look did without the established-socket walk.
    skipped: bool,
}

impl InFlightSource {
    pub fn new(port: u16) -> Self {
        InFlightSource {
            port,
            reader: None,
            failing: false,
            quiet: None,
            skipped: false,
        }
    }

    /// Whether the last look did without the established-socket walk.
    pub fn skipped(&self) -> bool {
        self.skipped
    }

    /// The connections of the network namespace's other listeners (`ports`) now, for
    /// the drain's attribution of its accepts: filtered by the kernel, whatever the
    /// namespace's size; where the kernel cannot filter them, the whole table, and only
    /// in a namespace as small as a pod's or a task's (`ATTRIBUTION_MAX`: a host's table
    /// read every 100 ms would cost more than the app). None when neither can be had,
    /// or read.
    pub fn others(&mut self, ports: &[u16]) -> Option<&[SockRecord]> {
        let reader = self.reader.as_mut()?;
        match reader.sample_others(ports).map(|dumped| dumped.is_ok()) {
            Some(true) => Some(reader.namespace_records()),
            Some(false) => None,
            None if listening::tcp_sockets_here()
                .is_some_and(|n| n <= listening::ATTRIBUTION_MAX) =>
            {
                reader.sample_namespace().ok()
            }
            None => None,
        }
    }

    /// The ports every listener of the network namespace listens on; None when they
    /// cannot be dumped (the reader not open yet, or failing).
    pub fn listening_ports(&mut self) -> Option<Vec<u16>> {
        self.reader.as_mut()?.listening_ports().ok()
    }

    /// The sockets of the last sample (empty when it failed).
    pub fn records(&self) -> &[SockRecord] {
        self.reader.as_ref().map_or(&[], |r| r.records())
    }

    /// The count now; None when it cannot be read (already said). With `may_skip` (not
    /// during a drain), a look at a quiet namespace takes the last full dump's figures
    /// after a dump of the listeners alone (quiet.rs); `records()` are then
    /// that dump's too.
    pub fn sample(&mut self, may_skip: bool) -> Option<InFlight> {
        // Read before the dump, so that a segment during it shows as a change next time.
        let segments = may_skip.then(netstat::segments).flatten();
        self.skipped = false;
        if let (Some(base), Some(reader)) = (&self.quiet, &mut self.reader) {
            if base.quiet(segments) {
                let still = reader
                    .sample_listeners()
                    .ok()
                    .and_then(|now| base.still(segments, now));
                if still.is_some() {
                    self.skipped = true;
                    return still;
                }
            }
        }
        self.quiet = None;
        let result = match &mut self.reader {
            Some(reader) => reader.sample(),
            None => InFlightReader::new(self.port).and_then(|mut reader| {
                let first = reader.sample();
                self.reader = Some(reader);
                first
            }),
        };
        match result {
            Ok(found) => {
                if std::mem::take(&mut self.failing) {
                    logging::info("in-flight count readable again", &[("port", &self.port)]);
                }
                self.quiet = self
                    .reader
                    .as_ref()
                    .and_then(|r| quiet::Baseline::after_dump(segments, r.records(), found));
                Some(found)
            }
            Err(err) => {
                if !std::mem::replace(&mut self.failing, true) {
                    logging::warn(
                        format!("cannot count in-flight requests: {err}"),
                        &[("port", &self.port)],
                    );
                }
                self.reader = None;
                None
            }
        }
    }
}
