//! Watch: upstream's semantics (without a resourceVersion, or for one named application, an
//! `ADDED` per matching application first; then live changes), RBAC checked per event with the
//! policy in force at that moment, and the stream ends when the caller's session does.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream;

use super::{AppQuery, Filter, doc_object};
use crate::error::AppError;
use crate::principal::Caller;
use crate::registry::{DocRef, EventType, Kind, Subscription, WatchError};
use crate::service::access::Access;
use crate::service::resource::parse_resource_version;
use crate::service::{Ctx, Reply, StreamItem};
use crate::state::ServerState;

/// How often a quiet watch re-checks that the caller's session is still valid.
pub(crate) const RECHECK: Duration = Duration::from_secs(10);

/// When the caller's session expires, on the clock streams wait with (`None`: never).
pub(crate) fn session_end(caller: &Caller) -> Option<tokio::time::Instant> {
    caller.principal.expires_at().map(|at| {
        let now = jiff::Timestamp::now().as_second();
        tokio::time::Instant::now() + Duration::from_secs(u64::try_from(at - now).unwrap_or(0))
    })
}

/// Waits until `at` (forever when `None`).
pub(crate) async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

pub async fn watch(ctx: Ctx, q: AppQuery) -> Result<Reply, AppError> {
    ctx.caller.require()?;
    let filter = Filter::new(&ctx.app, &q)?;
    let (initial, sub) = subscribe(&ctx, Kind::Application, &q.resource_version, !q.name.is_empty()).await?;
    let state = Arc::clone(&ctx.app);
    let caller = ctx.caller.clone();
    let visible: Arc<dyn Fn(&DocRef) -> bool + Send + Sync> = Arc::new(move |doc: &DocRef| {
        filter.matches(doc)
            && Access::hidden(super::RESOURCE, "get").allows(
                &state,
                &caller.principal,
                &doc_object(&state, doc),
            )
    });
    Ok(events(&ctx, initial, sub, visible, "application"))
}

/// The subscription of a watch from `resource_version` (empty: now) and the objects to send
/// first: all of them without a version, or for a watch of one `named` object, none otherwise.
pub(crate) async fn subscribe(
    ctx: &Ctx,
    kind: Kind,
    resource_version: &str,
    named: bool,
) -> Result<(Vec<DocRef>, Subscription), AppError> {
    let registry = &ctx.app.registry;
    Ok(match parse_resource_version(resource_version)? {
        Some(rv) if !named => (Vec::new(), registry.watch(kind, rv).await.map_err(watch_error)?),
        _ => registry.list_and_watch(kind).map_err(watch_error)?,
    })
}

/// The stream of a watch: an `ADDED` for each of `initial` the caller may see, then the live
/// events; each object as `field` of its event.
pub(crate) fn events(
    ctx: &Ctx,
    initial: Vec<DocRef>,
    sub: Subscription,
    visible: Arc<dyn Fn(&DocRef) -> bool + Send + Sync>,
    field: &'static str,
) -> Reply {
    let first = {
        let visible = Arc::clone(&visible);
        stream::iter(initial).filter_map(move |doc| {
            let show = visible(&doc);
            std::future::ready(show.then(|| {
                Ok(StreamItem::Event {
                    kind: EventType::Added.as_str(),
                    field,
                    doc,
                    proto: None,
                })
            }))
        })
    };
    let live = live_events(Arc::clone(&ctx.app), ctx.caller.clone(), sub, visible, field);
    Reply::Stream(first.chain(live).boxed())
}

/// Live events (each object as `field` of its event), ending with an error when the session ends
/// or the watch cannot continue.
fn live_events(
    state: Arc<ServerState>,
    caller: Caller,
    sub: Subscription,
    visible: Arc<dyn Fn(&DocRef) -> bool + Send + Sync>,
    field: &'static str,
) -> impl futures_util::Stream<Item = Result<StreamItem, AppError>> + Send + 'static {
    let expires = session_end(&caller);
    // One timer for the whole stream: events the caller may not see must not keep
    // postponing the periodic check.
    let mut recheck = tokio::time::interval_at(tokio::time::Instant::now() + RECHECK, RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // (subscription, ended, when the session was last checked, the periodic check)
    let init = (sub, false, None::<tokio::time::Instant>, recheck);
    stream::unfold(init, move |(mut sub, done, mut checked, mut recheck)| {
        let state = Arc::clone(&state);
        let caller = caller.clone();
        let visible = Arc::clone(&visible);
        async move {
            if done {
                return None;
            }
            loop {
                let expiry = until(expires);
                tokio::select! {
                    next = sub.next() => match next {
                        None => return None,
                        Some(Err(err)) => return Some((Err(watch_error(err)), (sub, true, checked, recheck))),
                        Some(Ok(event)) => {
                            if visible(&event.doc) {
                                // Before anything is sent, the session must still be good; at
                                // most once a second, as a busy watch sees many events.
                                if checked.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                                    checked = Some(tokio::time::Instant::now());
                                    if let Err(err) = state.auth.authenticator.revalidate(&caller).await {
                                        return Some((Err(err), (sub, true, checked, recheck)));
                                    }
                                }
                                let item = StreamItem::Event { kind: event.kind.as_str(), field, doc: Arc::clone(&event.doc), proto: Some(event.proto.clone()) };
                                return Some((Ok(item), (sub, false, checked, recheck)));
                            }
                        }
                    },
                    () = expiry => {
                        return Some((Err(AppError::Unauthenticated("session expired: log in again".to_owned())), (sub, true, checked, recheck)));
                    }
                    _ = recheck.tick() => {
                        if let Err(err) = state.auth.authenticator.revalidate(&caller).await {
                            return Some((Err(err), (sub, true, checked, recheck)));
                        }
                    }
                }
            }
        }
    })
}

fn watch_error(err: WatchError) -> AppError {
    match err {
        WatchError::TooOld { .. } | WatchError::Lagged => AppError::Aborted(err.to_string()),
        WatchError::Future { .. } => AppError::InvalidArgument(err.to_string()),
    }
}
