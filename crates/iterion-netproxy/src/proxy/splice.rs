//! Zero-copy splicing (socket → pipe → socket, splice(2)). A tunnel on
//! loopback is CPU-bound by memcpy: a user-space copy doubles the copies
//! per byte, splice keeps the data in the kernel.

use std::io;
use std::os::fd::OwnedFd;

use rustix::pipe::{PipeFlags, SpliceFlags, fcntl_setpipe_size, pipe_with, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes moved per splice call (and the pipe size asked for).
const CHUNK: usize = 256 * 1024;

pub(super) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    /// A non-blocking pipe; `None` (fall back to copying) when the
    /// process is out of descriptors.
    pub(super) fn new() -> Option<Self> {
        let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC).ok()?;
        // Best effort: a bigger pipe means fewer syscalls per byte.
        let _ = fcntl_setpipe_size(&write, CHUNK);
        Some(Self { read, write })
    }

    /// Move bytes from `from` to `to` until `from` reaches EOF.
    pub(super) async fn pump(&self, from: &TcpStream, to: &TcpStream) -> io::Result<()> {
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        loop {
            from.readable().await?;
            let filled = match from.try_io(Interest::READABLE, || {
                splice(from, None, &self.write, None, CHUNK, flags).map_err(io::Error::from)
            }) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            // Drain the pipe completely before reading again, so it
            // never holds more than one chunk.
            let mut left = filled;
            while left > 0 {
                to.writable().await?;
                match to.try_io(Interest::WRITABLE, || {
                    splice(&self.read, None, to, None, left, flags).map_err(io::Error::from)
                }) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => left -= n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
}
