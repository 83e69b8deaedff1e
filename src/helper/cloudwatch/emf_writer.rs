//! Where Embedded Metric Format records go, as AWS's embedded-metrics libraries choose
//! it: the CloudWatch agent at `AWS_EMF_AGENT_ENDPOINT` (`tcp://` or `udp://`), else
//! lifeguard's stdout for the container's log driver (awslogs, FireLens). One record a
//! line, each written whole with one write(2): on a pipe a write up to PIPE_BUF (4 KiB;
//! a record of three metrics is well under 2) is never split, so a record never cuts a
//! line of the app's, which shares that stdout. Written by a thread of its own, so a
//! stalled log driver or a dead agent costs the record (the publisher's timeout), never
//! a turn of the helper's runtimes; no credentials are looked up and no AWS endpoint is
//! called in this mode.
#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsFd;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;

use super::outcome::Outcome;
use super::plan::Datum;
use super::{emf, Put, PutCall};
use crate::settings::{Agent, CloudWatch as Config};

/// How long a connection to the agent or a write to it may take.
const AGENT_TIMEOUT: Duration = Duration::from_secs(1);

type Job = (String, oneshot::Sender<Result<(), String>>);

pub struct EmfSink {
    namespace: String,
    dimensions: Vec<(String, String)>,
    jobs: SyncSender<Job>,
    /// How long a record may take to be written before it counts as lost.
    timeout: Duration,
}

impl EmfSink {
    /// Starts the writer thread for `agent` (None: stdout).
    pub fn start(config: &Config, agent: Option<Agent>, timeout: Duration) -> io::Result<EmfSink> {
        // One record waits while one is written: the publisher has at most one call
        // under way, so a full queue means the writer is stuck.
        let (jobs, queue) = mpsc::sync_channel::<Job>(1);
        crate::kernel::spawn_thread(
            "emf-writer",
            Box::new(move || {
                let mut to = Destination::new(agent);
                for (line, done) in queue {
                    let _ = done.send(to.write(&line));
                }
            }),
        )?;
        Ok(EmfSink {
            namespace: config.namespace.clone(),
            dimensions: config.dimensions.clone(),
            jobs,
            timeout,
        })
    }
}

impl Put for EmfSink {
    fn put(&self, batch: Vec<Datum>) -> PutCall {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let Some(line) = emf::record(&self.namespace, &self.dimensions, &batch, now) else {
            return Box::pin(async { Ok(()) });
        };
        let (done, written) = oneshot::channel();
        let sent = self.jobs.try_send((line, done));
        let timeout = self.timeout;
        Box::pin(async move {
            match sent {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    return Err((
                        Outcome::Timeout,
                        "the previous EMF record is still being written: this one is dropped"
                            .to_string(),
                    ))
                }
                Err(TrySendError::Disconnected(_)) => {
                    return Err((Outcome::Error, "the EMF writer thread is gone".to_string()))
                }
            }
            match tokio::time::timeout(timeout, written).await {
                Ok(Ok(result)) => result.map_err(|reason| (Outcome::Error, reason)),
                Ok(Err(_)) => Err((Outcome::Error, "the EMF writer thread is gone".to_string())),
                Err(_) => Err((
                    Outcome::Timeout,
                    format!(
                        "the EMF record was not written within {}",
                        crate::seconds::human(timeout)
                    ),
                )),
            }
        })
    }
}

enum Destination {
    Stdout,
    Udp {
        agent: (String, u16),
        socket: Option<UdpSocket>,
    },
    Tcp {
        agent: (String, u16),
        /// Kept between records; dropped on an error, so an agent that comes back is
        /// connected to again at the next record.
        stream: Option<TcpStream>,
    },
}

impl Destination {
    fn new(agent: Option<Agent>) -> Destination {
        match agent {
            None => Destination::Stdout,
            Some(Agent::Udp(host, port)) => Destination::Udp {
                agent: (host, port),
                socket: None,
            },
            Some(Agent::Tcp(host, port)) => Destination::Tcp {
                agent: (host, port),
                stream: None,
            },
        }
    }

    /// Writes one record and its newline; why not, on one line.
    fn write(&mut self, line: &str) -> Result<(), String> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        match self {
            Destination::Stdout => crate::kernel::write_whole(io::stdout().as_fd(), &bytes)
                .map_err(|e| format!("writing the EMF record to stdout: {e}")),
            Destination::Udp { agent, socket } => {
                let (host, port) = (agent.0.as_str(), agent.1);
                let addr = (host, port)
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| {
                        format!("the CloudWatch agent udp://{host}:{port}: no address")
                    })?;
                let sock = match socket {
                    Some(s) => s,
                    None => {
                        let any = if addr.is_ipv4() {
                            "0.0.0.0:0"
                        } else {
                            "[::]:0"
                        };
                        socket.insert(UdpSocket::bind(any).map_err(|e| e.to_string())?)
                    }
                };
                sock.send_to(&bytes, addr).map(drop).map_err(|e| {
                    format!("sending to the CloudWatch agent udp://{host}:{port}: {e}")
                })
            }
            Destination::Tcp { agent, stream } => {
                let (host, port) = (agent.0.as_str(), agent.1);
                let result = (|| -> io::Result<()> {
                    if stream.is_none() {
                        let addr = (host, port)
                            .to_socket_addrs()?
                            .next()
                            .ok_or_else(|| io::Error::other("no address"))?;
                        let s = TcpStream::connect_timeout(&addr, AGENT_TIMEOUT)?;
                        s.set_write_timeout(Some(AGENT_TIMEOUT))?;
                        *stream = Some(s);
                    }
                    stream.as_mut().expect("connected above").write_all(&bytes)
                })();
                result.map_err(|e| {
                    *stream = None;
                    format!("the CloudWatch agent tcp://{host}:{port}: {e}")
                })
            }
        }
    }
}
