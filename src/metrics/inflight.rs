//! TEMPORARY stub until the in-flight reader lands (wt-inflight).
#![forbid(unsafe_code)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    pub requests: u64,
    pub accept_queue: Option<u64>,
}
pub struct InFlightReader;
impl InFlightReader {
    pub fn new(_port: u16) -> std::io::Result<Self> {
        Ok(InFlightReader)
    }
    pub fn sample(&mut self) -> std::io::Result<InFlight> {
        Ok(InFlight::default())
    }
}
