//! Opening a connection to a repository with gix: the transport for its URL's scheme, the
//! HTTP options (tiphys's TLS settings handed to reqwest, a bearer token header), the `ssh`
//! command with the call's key and `known_hosts` files, and the credentials gix asks for.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gix::protocol::transport::client::blocking_io::{Transport, connect, http, ssh};
use rustls::ClientConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{GitError, Remote};

/// The host of a repository URL, as errors name it (`host` or `host:port`); the URL itself
/// when it has no recognisable host.
pub fn host_of(url: &str) -> String {
    if let Ok(parsed) = gix::url::parse(gix::bstr::BStr::new(url.as_bytes()))
        && let Some(host) = parsed.host()
    {
        return match parsed.port {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
    }
    "the repository host".to_owned()
}

/// The host and port a repository URL connects to (the scheme's default port when none is
/// given), and whether it is SSH.
pub fn endpoint(url: &str) -> Option<(String, u16, bool)> {
    let parsed = gix::url::parse(gix::bstr::BStr::new(url.as_bytes())).ok()?;
    let host = parsed.host()?.to_owned();
    let ssh = parsed.scheme == gix::url::Scheme::Ssh;
    let port = parsed.port.unwrap_or(match parsed.scheme {
        gix::url::Scheme::Ssh => 22,
        gix::url::Scheme::Http => 80,
        gix::url::Scheme::Git => 9418,
        _ => 443,
    });
    Some((host, port, ssh))
}

/// What a connection needs to stay valid while it is used.
pub struct Opened {
    pub transport: Box<dyn Transport + Send>,
    /// For `with_transport_options` (HTTP only).
    pub http_options: Option<http::Options>,
    /// The key and `known_hosts` files of an SSH call; removed on drop.
    pub files: Option<CallFiles>,
}

/// Only these schemes: never `file://` or a local path, which would read the server's disk.
pub fn parse_url(remote: &Remote) -> Result<gix::url::Url, GitError> {
    let url =
        gix::url::parse(gix::bstr::BStr::new(remote.url.as_bytes())).map_err(|_| GitError::UnsupportedUrl)?;
    match url.scheme {
        gix::url::Scheme::Https | gix::url::Scheme::Http | gix::url::Scheme::Ssh | gix::url::Scheme::Git
            if url.host().is_some() =>
        {
            Ok(url)
        }
        _ => Err(GitError::UnsupportedUrl),
    }
}

pub fn open(remote: &Remote, scratch: &Path, timeout: Duration) -> Result<Opened, GitError> {
    let url = parse_url(remote)?;
    let host = remote.host();
    let mut ssh_options = ssh::connect::Options::default();
    let mut files = None;
    let mut http_options = None;
    match url.scheme {
        gix::url::Scheme::Ssh => {
            ssh_program()?;
            let call =
                CallFiles::write(scratch, remote).map_err(|_| GitError::Failed { host: host.clone() })?;
            ssh_options.command = Some(call.ssh_command(remote, timeout).into());
            ssh_options.kind = Some(ssh::ProgramKind::Ssh);
            files = Some(call);
        }
        gix::url::Scheme::Https | gix::url::Scheme::Http => {
            remote.warn_if_cleartext();
            http_options = Some(http_options_for(remote, timeout)?);
        }
        _ => {}
    }
    if url.scheme == gix::url::Scheme::Git {
        return Ok(Opened {
            transport: Box::new(daemon(&url, &host, timeout)?),
            http_options: None,
            files: None,
        });
    }
    let transport = connect::connect(
        url,
        connect::Options {
            version: gix::protocol::transport::Protocol::V2,
            ssh: ssh_options,
            trace: false,
        },
    )
    .map_err(|e| super::error::classify(&format!("{e:?}").to_lowercase(), &host))?;
    Ok(Opened {
        transport,
        http_options,
        files,
    })
}

/// A `git://` connection whose socket gives up after `timeout` without progress (gix's own
/// waits forever for a server that accepted and then says nothing).
fn daemon(
    url: &gix::url::Url,
    host: &str,
    timeout: Duration,
) -> Result<gix::protocol::transport::client::git::blocking_io::Connection<TcpStream, TcpStream>, GitError> {
    use std::net::ToSocketAddrs;
    let unreachable = || GitError::Unreachable {
        host: host.to_owned(),
    };
    let name = url.host().ok_or_else(unreachable)?;
    let port = url.port.unwrap_or(9418);
    let address = (name, port)
        .to_socket_addrs()
        .map_err(|_| unreachable())?
        .next()
        .ok_or_else(unreachable)?;
    let stream = TcpStream::connect_timeout(&address, timeout).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => GitError::Timeout {
            host: host.to_owned(),
            after: timeout,
        },
        _ => unreachable(),
    })?;
    let failed = || GitError::Failed {
        host: host.to_owned(),
    };
    stream.set_read_timeout(Some(timeout)).map_err(|_| failed())?;
    // Packet lines go out in small writes; Nagle's algorithm would hold each behind an ACK.
    stream.set_nodelay(true).map_err(|_| failed())?;
    stream.set_write_timeout(Some(timeout)).map_err(|_| failed())?;
    let write = stream.try_clone().map_err(|_| failed())?;
    Ok(
        gix::protocol::transport::client::git::blocking_io::Connection::new(
            stream,
            write,
            gix::protocol::transport::Protocol::V2,
            url.path.clone(),
            Some((name.to_owned(), url.port)),
            gix::protocol::transport::client::git::ConnectMode::Daemon,
            false,
        ),
    )
}

/// The rustls configuration of a call: the system's roots plus the repository host's CA
/// certificates (or no verification when `insecure`), and the client certificate if any.
pub fn tls_config(remote: &Remote) -> Result<ClientConfig, GitError> {
    let host = remote.host();
    let builder = ClientConfig::builder_with_provider(crate::tlsclient::provider())
        .with_safe_default_protocol_versions()
        .map_err(|_| GitError::Failed { host: host.clone() })?;
    let builder =
        if remote.insecure {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(
                crate::tlsclient::NoVerification::new(crate::tlsclient::provider()),
            ))
        } else {
            let roots = crate::tlsclient::roots(&remote.ca_certificates)
                .map_err(|_| GitError::Certificate { host })?;
            builder.with_root_certificates(roots)
        };
    match &remote.tls_client_cert {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|_| GitError::BadClientCertificate)?;
            let key =
                PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|_| GitError::BadClientCertificate)?;
            if chain.is_empty() {
                return Err(GitError::BadClientCertificate);
            }
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|_| GitError::BadClientCertificate)
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

fn http_options_for(remote: &Remote, timeout: Duration) -> Result<http::Options, GitError> {
    let tls = tls_config(remote)?;
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(move |builder| {
            Ok(builder
                .tls_backend_preconfigured(tls.clone())
                .timeout(timeout)
                .no_proxy())
        })),
        configure_request: None,
    };
    let mut options = http::Options {
        connect_timeout: Some(timeout),
        user_agent: Some(format!("git/tiphys-{}", env!("CARGO_PKG_VERSION"))),
        backend: Some(Arc::new(Mutex::new(backend))),
        ..http::Options::default()
    };
    if !remote.bearer_token.is_empty() {
        options
            .extra_headers
            .push(format!("Authorization: Bearer {}", remote.bearer_token));
    }
    Ok(options)
}

/// The identity gix asks for when an HTTP server answers 401: the repository's username and
/// password, or nothing (then the call fails as unauthenticated).
pub fn credentials(
    remote: &Remote,
) -> impl FnMut(gix::credentials::helper::Action) -> gix::Result<Option<gix::credentials::protocol::Outcome>>
+ 'static {
    let (username, password) = (remote.username.clone(), remote.password.clone());
    move |action| match action {
        gix::credentials::helper::Action::Get(ctx) if !(username.is_empty() && password.is_empty()) => {
            Ok(Some(gix::credentials::protocol::Outcome {
                identity: gix::sec::identity::Account {
                    username: username.clone(),
                    password: password.clone(),
                    oauth_refresh_token: None,
                },
                next: gix::credentials::helper::NextAction::from(ctx),
            }))
        }
        _ => Ok(None),
    }
}

/// The private key and `known_hosts` of one SSH call, in a directory only the server's user
/// may read, removed when the call ends.
pub struct CallFiles {
    dir: PathBuf,
}

impl CallFiles {
    fn write(scratch: &Path, remote: &Remote) -> std::io::Result<Self> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(scratch)?;
        let dir = scratch.join(format!("ssh-{}", crate::random::token(16)));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let files = Self { dir };
        let write = |name: &str, text: &str| -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(files.dir.join(name))?;
            file.write_all(text.as_bytes())?;
            if !text.ends_with('\n') {
                file.write_all(b"\n")?;
            }
            Ok(())
        };
        write("key", &remote.ssh_private_key)?;
        write("known_hosts", &remote.known_hosts.join("\n"))?;
        Ok(files)
    }

    /// `ssh` with nothing from the user's or the system's configuration: the call's key only,
    /// its `known_hosts` only (strict unless `insecure`), no prompts, bounded waits.
    fn ssh_command(&self, remote: &Remote, timeout: Duration) -> String {
        let secs = timeout.as_secs().max(1);
        // ssh's own messages go to a file of the call (gix would copy them to the server's
        // stderr); they are read to classify a failure, never passed on.
        let mut args = vec![
            "ssh".to_owned(),
            format!("2>>{}", quoted(&self.dir.join("stderr"))),
            "-F".to_owned(),
            "/dev/null".to_owned(),
            "-o BatchMode=yes".to_owned(),
            "-o IdentitiesOnly=yes".to_owned(),
            "-o LogLevel=ERROR".to_owned(),
            format!("-o ConnectTimeout={secs}"),
            "-o ServerAliveInterval=5".to_owned(),
            "-o ServerAliveCountMax=3".to_owned(),
            "-o GlobalKnownHostsFile=/dev/null".to_owned(),
        ];
        if remote.ssh_private_key.trim().is_empty() {
            args.push("-o IdentityFile=none".to_owned());
        } else {
            args.push(format!("-o IdentityFile={}", quoted(&self.dir.join("key"))));
        }
        if remote.insecure {
            args.push("-o StrictHostKeyChecking=no".to_owned());
            args.push("-o UserKnownHostsFile=/dev/null".to_owned());
        } else {
            args.push("-o StrictHostKeyChecking=yes".to_owned());
            args.push(format!(
                "-o UserKnownHostsFile={}",
                quoted(&self.dir.join("known_hosts"))
            ));
        }
        args.join(" ")
    }
}

impl CallFiles {
    /// What `ssh` wrote to stderr during the call (its first 16 KiB).
    pub fn stderr(&self) -> String {
        use std::io::Read;
        let mut text = String::new();
        if let Ok(file) = std::fs::File::open(self.dir.join("stderr")) {
            let _ = file.take(16 * 1024).read_to_string(&mut text);
        }
        text
    }
}

/// The classified failure of a call: the library's error and, for SSH, what `ssh` said.
pub fn failure(error: &dyn std::fmt::Debug, files: Option<&CallFiles>, host: &str) -> GitError {
    let mut text = format!("{error:?}");
    if let Some(files) = files {
        text.push(' ');
        text.push_str(&files.stderr());
    }
    super::error::classify(&text.to_lowercase(), host)
}

impl Drop for CallFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// gix runs the `ssh` command line through `/bin/sh`, which finds `ssh` on `PATH`. Without
/// either, the spawn fails with "no such file", which would read as a missing repository: say
/// what is missing instead, before anything is written or run.
fn ssh_program() -> Result<(), GitError> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| runnable(&dir.join("ssh"))));
    if runnable(Path::new("/bin/sh")) && on_path {
        Ok(())
    } else {
        Err(GitError::NoSshProgram)
    }
}

/// A path as one word of a `sh` command line.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}
