//! A classic Helm repository's `index.yaml`, fetched over HTTP(S) with the repository's
//! credentials and trust, bounded in size and time.

use super::{GitError, Remote, transport};

/// The bytes of `<url>/index.yaml`, at most `max_bytes`.
pub async fn fetch_index(remote: &Remote, limits: &super::Limits) -> Result<Vec<u8>, GitError> {
    if !limits.enabled {
        return Err(GitError::Disabled);
    }
    let (timeout, max_bytes) = (limits.timeout, limits.max_bytes);
    let host = remote.host();
    let base = remote.url.trim_end_matches('/');
    if !(base.starts_with("https://") || base.starts_with("http://")) {
        return Err(GitError::UnsupportedUrl);
    }
    let tls = transport::tls_config(remote)?;
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::limited(5))
        .build()
        .map_err(|_| GitError::Failed { host: host.clone() })?;
    remote.warn_if_cleartext();
    let mut request = client.get(format!("{base}/index.yaml"));
    if !remote.bearer_token.is_empty() {
        request = request.bearer_auth(&remote.bearer_token);
    } else if !remote.username.is_empty() || !remote.password.is_empty() {
        request = request.basic_auth(&remote.username, Some(&remote.password));
    }
    let classify = |e: reqwest::Error| {
        if e.is_timeout() {
            return GitError::Timeout {
                host: host.clone(),
                after: timeout,
            };
        }
        let mut text = String::new();
        let mut source: Option<&dyn std::error::Error> = Some(&e);
        while let Some(err) = source {
            text.push_str(&format!("{err:?} "));
            source = err.source();
        }
        match super::error::classify(&text.to_lowercase(), &host) {
            GitError::Timeout { host, .. } => GitError::Timeout { host, after: timeout },
            other => other,
        }
    };
    let mut response = request.send().await.map_err(classify)?;
    match response.status().as_u16() {
        200..=299 => {}
        401 | 403 => return Err(GitError::Auth { host }),
        404 => return Err(GitError::NoRepository { host }),
        _ => return Err(GitError::Failed { host }),
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(classify)? {
        if body.len() as u64 + chunk.len() as u64 > max_bytes {
            return Err(GitError::TooLarge {
                host,
                limit: max_bytes,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
