use std::time::Duration;

/// Transport knobs of the Redy model (`s`, server threads, is the server's setting).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Manager address, `host:port`.
    pub manager: String,
    /// `c`: lanes, i.e. connections per server.
    pub connections: usize,
    /// `b`: most ops packed into one request frame.
    pub batch_size: usize,
    /// `q`: most request frames in flight per connection.
    pub queue_depth: usize,
    /// An op not answered within this time fails its connection.
    pub op_timeout: Duration,
    pub connect_timeout: Duration,
    /// Attempts for an op that keeps hitting `wrong server` after table refreshes.
    pub max_redirects: u32,
    /// A waiting thread polls its sockets without sleeping for this long before it
    /// blocks: a sleeping thread's wake-up costs more than a loopback round trip.
    pub spin: Duration,
}

impl ClientConfig {
    pub fn new(manager: impl Into<String>) -> Self {
        Self {
            manager: manager.into(),
            connections: 1,
            batch_size: 64,
            queue_depth: 4,
            op_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            max_redirects: 4,
            spin: Duration::from_micros(50),
        }
    }

    pub fn connections(mut self, c: usize) -> Self {
        self.connections = c.max(1);
        self
    }

    pub fn batch_size(mut self, b: usize) -> Self {
        self.batch_size = b.clamp(1, u16::MAX as usize);
        self
    }

    pub fn queue_depth(mut self, q: usize) -> Self {
        self.queue_depth = q.max(1);
        self
    }

    /// Busy-poll window before a waiting thread sleeps (`Duration::ZERO` never spins);
    /// the thread yields the core between polls.
    pub fn spin(mut self, d: Duration) -> Self {
        self.spin = d;
        self
    }

    pub fn op_timeout(mut self, t: Duration) -> Self {
        self.op_timeout = t;
        self
    }
}
