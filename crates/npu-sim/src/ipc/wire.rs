//! The exchange between an importing process and the exporter's broker: an abstract Unix
//! socket per exporting process, a one-line request (the key), and a fixed-size reply that
//! carries the shared file over SCM_RIGHTS when the import is granted.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

use npu_sys::*;

use crate::error::{Res, SimError, fail};

/// How long either side waits for the other before giving up: a peer that stops answering
/// fails the call instead of hanging it.
pub(super) const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest request line accepted (a key is at most 64 bytes).
const MAX_REQUEST: usize = 128;
const REPLY_LEN: usize = 48;

/// The socket name of the broker of process `pid`.
fn address(pid: i32) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("npusim-ipc-{pid}"))
}

/// Binds this process's broker socket.
pub(super) fn listen(pid: i32) -> std::io::Result<UnixListener> {
    UnixListener::bind_addr(&address(pid)?)
}

/// What the broker tells an importer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    /// 0 when granted (the file follows), else the ACL code of the refusal.
    pub(crate) code: aclError,
    /// What the key shares ([`super::Kind`] as a number).
    pub(crate) kind: u32,
    /// The exporter's device.
    pub(crate) device: i32,
    /// Page size of the exported allocation.
    pub(crate) page_size: u32,
    /// Offset of the exported range in the allocation.
    pub(crate) offset: u64,
    /// Length of the exported range.
    pub(crate) size: u64,
    /// Length of the whole allocation (what the file holds).
    pub(crate) len: u64,
    /// The memory attribute of shared physical memory (aclrtPhysicalMemProp::memAttr).
    pub(crate) attr: u32,
}

impl Reply {
    /// A refusal with `code`.
    pub(super) fn refusal(code: aclError) -> Self {
        Reply {
            code,
            kind: 0,
            device: 0,
            page_size: 0,
            offset: 0,
            size: 0,
            len: 0,
            attr: 0,
        }
    }

    fn encode(&self) -> [u8; REPLY_LEN] {
        let mut out = [0u8; REPLY_LEN];
        out[0..4].copy_from_slice(&self.code.to_le_bytes());
        out[4..8].copy_from_slice(&self.device.to_le_bytes());
        out[8..12].copy_from_slice(&self.page_size.to_le_bytes());
        out[12..16].copy_from_slice(&self.kind.to_le_bytes());
        out[16..24].copy_from_slice(&self.offset.to_le_bytes());
        out[24..32].copy_from_slice(&self.size.to_le_bytes());
        out[32..40].copy_from_slice(&self.len.to_le_bytes());
        out[40..44].copy_from_slice(&self.attr.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8; REPLY_LEN]) -> Self {
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let long = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        Reply {
            code: word(0) as i32,
            device: word(4) as i32,
            page_size: word(8),
            kind: word(12),
            offset: long(16),
            size: long(24),
            len: long(32),
            attr: word(40),
        }
    }
}

/// The pid of the process at the other end of `stream`, as the kernel vouches for it.
pub(super) fn peer_pid(stream: &UnixStream) -> Option<i32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes a ucred into the buffer of the given length.
    let ok = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    } == 0;
    ok.then_some(cred.pid)
}

/// Reads the key an importer asks for (one line).
pub(super) fn read_request(stream: &mut UnixStream) -> Option<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < MAX_REQUEST {
        match stream.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => return String::from_utf8(line).ok(),
            Ok(1) => line.push(byte[0]),
            _ => return None,
        }
    }
    None
}

/// Sends `reply`, with `file` attached when the import is granted.
pub(super) fn send_reply(
    stream: &UnixStream,
    reply: &Reply,
    file: Option<&OwnedFd>,
) -> std::io::Result<()> {
    let bytes = reply.encode();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // Room for one descriptor, aligned for cmsghdr.
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(file) = file {
        // SAFETY: CMSG_SPACE is a pure size computation.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as _;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: the control buffer holds one cmsghdr with room for one descriptor
        // (msg_controllen set above), so the first header and its data are in bounds.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
            libc::CMSG_DATA(header)
                .cast::<RawFd>()
                .write_unaligned(file.as_raw_fd());
        }
    }
    // SAFETY: msg points at live buffers for the duration of the call.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent == bytes.len() as isize {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn ipc_error(pid: i32, what: impl std::fmt::Display) -> SimError {
    SimError::new(
        ACL_ERROR_RT_IPC_ERROR,
        format!("the exporting process {pid} could not be asked for the key: {what}"),
    )
}

/// Asks the broker of process `pid` for `key`: the reply and, when granted, the shared file.
/// A process that is gone (or never exported anything) → 507022.
pub(super) fn request(pid: i32, key: &str) -> Res<(Reply, OwnedFd)> {
    let mut stream = address(pid)
        .and_then(|address| UnixStream::connect_addr(&address))
        .map_err(|error| ipc_error(pid, format!("{error} (has it exited?)")))?;
    stream
        .set_read_timeout(Some(PEER_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(PEER_TIMEOUT)))
        .and_then(|()| stream.write_all(format!("{key}\n").as_bytes()))
        .map_err(|error| ipc_error(pid, error))?;
    let mut bytes = [0u8; REPLY_LEN];
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: msg points at live buffers for the duration of the call; received descriptors
    // are close-on-exec.
    let received = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    // SAFETY: the control buffer was filled by recvmsg (msg_controllen updated), so walking
    // its headers stays in bounds.
    let file = unsafe {
        let header = libc::CMSG_FIRSTHDR(&msg);
        (!header.is_null()
            && (*header).cmsg_level == libc::SOL_SOCKET
            && (*header).cmsg_type == libc::SCM_RIGHTS)
            .then(|| OwnedFd::from_raw_fd(libc::CMSG_DATA(header).cast::<RawFd>().read_unaligned()))
    };
    if received != REPLY_LEN as isize {
        return Err(ipc_error(pid, "no complete reply"));
    }
    let reply = Reply::decode(&bytes);
    match (reply.code, file) {
        (0, Some(file)) => Ok((reply, file)),
        (0, None) => Err(ipc_error(pid, "the reply carried no memory")),
        (code, _) => fail!(
            code,
            "the exporting process {pid} refused key {key:?}: {}",
            refusal(code)
        ),
    }
}

/// Why a broker refuses, for the importer's message.
fn refusal(code: aclError) -> &'static str {
    match code {
        ACL_ERROR_RT_NO_PERMISSION => {
            "this process is not in the key's whitelist (aclrtIpcMemSetImportPid)"
        }
        _ => "it exports no memory under that key (never, or closed or freed since)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_survives_its_encoding() {
        let reply = Reply {
            code: -3,
            kind: 2,
            device: 7,
            page_size: 2 << 20,
            offset: 96,
            size: u64::MAX,
            len: 1 << 40,
            attr: 9,
        };
        assert_eq!(Reply::decode(&reply.encode()), reply);
    }
}
