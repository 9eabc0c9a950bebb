//! A page of applications (a tiphys extension of `List`): filtered, sorted and cut by the
//! catalog's indexes ([`crate::catalog`]), with facet counts, all under the caller's RBAC: an
//! application the caller may not `get` is neither listed nor counted.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::query::{Filter, PageParams};
use super::{RESOURCE, rbac_object};
use crate::catalog::{Entry, Field, Index, PageQuery, cursor, index::position};
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::Kind;
use crate::service::access::Access;
use crate::service::{Ctx, PageInfo, Reply};

/// The most values a facet lists (the most frequent first): a field such as the destination
/// namespace may have as many values as there are applications.
pub const MAX_FACET_VALUES: usize = 1000;
/// The key id of continue tokens' sealing key.
const CURSOR_KEY_ID: u8 = 1;

pub(super) fn list(
    ctx: &Ctx,
    principal: &Principal,
    filter: &Filter,
    params: &PageParams,
) -> Result<Reply, AppError> {
    let state = &ctx.app;
    let key = state.auth.sealing_key(cursor::PURPOSE, CURSOR_KEY_ID);
    let now = state.clock.now_s();
    let digest = params.digest(filter);
    let after = match params.continue_token.as_str() {
        "" => None,
        token => Some(
            cursor::open(&key, token, &digest, now).map_err(|e| AppError::InvalidArgument(e.to_string()))?,
        ),
    };
    let catalog = state.catalog(|| {
        let control = state.namespace.clone();
        Box::new(move |doc| rbac_object(&control, &doc.summary.project, &doc.key.namespace, &doc.key.name))
    })?;
    let access = Access::hidden(RESOURCE, "get");
    // RBAC's answer depends on the caller, the policy and the projects' roles, and on nothing
    // else of an application than its RBAC object, which its entry's uid stands for.
    let policy = state.rbac.policy();
    let version = (
        Arc::clone(&policy) as Arc<dyn std::any::Any + Send + Sync>,
        state.registry.kind_revision(Kind::AppProject),
    );
    let decisions = catalog
        .visibility
        .of(&crate::rbac::fingerprint(&policy, principal), version);
    let mut decisions = decisions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let current = catalog.current();
    let index = current.index();
    let bound = index.len() * 2 + 1024;
    let mut visible =
        |e: &Entry| decisions.allowed(e.uid, bound, || access.allows(state, principal, &e.rbac));
    let limit = if params.limit == 0 {
        usize::MAX - 1
    } else {
        params.limit
    };
    let (entries, more) = index.page(
        &PageQuery {
            sort: params.sort,
            descending: params.descending,
            after: after.as_ref(),
            limit,
            fields: filter.fields(),
            search: filter.search(),
        },
        |e| filter.matches(&e.doc) && visible(e),
    );
    let continue_token = match entries.last() {
        Some(last) if more => Some(cursor::issue(
            &key,
            &digest,
            position(params.sort, &last.doc),
            now,
        )),
        _ => None,
    };
    let items = entries.iter().map(|e| Arc::clone(&e.doc)).collect();
    let facets = (!params.facets.is_empty()).then(|| facets(index, filter, &params.facets, &mut visible));
    let resource_version = current.revision();
    Ok(Reply::List {
        resource_version,
        items,
        page: Some(Box::new(PageInfo {
            continue_token,
            facets,
        })),
    })
}

/// Per field of `fields`, how many applications the caller may see have each value, with
/// every filter but that field's applied.
fn facets(
    index: &Index,
    filter: &Filter,
    fields: &[Field],
    visible: &mut impl FnMut(&Entry) -> bool,
) -> Value {
    let mut counts: Vec<HashMap<String, i64>> = vec![HashMap::new(); fields.len()];
    for entry in index.entries() {
        let failed = filter.failures(&entry.doc);
        // Failing two filters (or anything but a field) leaves it out of every facet.
        if failed.count_ones() > 1 || fields.iter().all(|f| failed != 0 && failed != f.bit()) {
            continue;
        }
        if !visible(entry) {
            continue;
        }
        for (field, counts) in fields.iter().zip(counts.iter_mut()) {
            if failed == 0 || failed == field.bit() {
                field.each_value(&entry.doc.summary, |value| match counts.get_mut(value) {
                    Some(count) => *count += 1,
                    None => {
                        counts.insert(value.to_owned(), 1);
                    }
                });
            }
        }
    }
    let facets: Vec<Value> = fields
        .iter()
        .zip(counts)
        .map(|(field, counts)| {
            let mut values: Vec<(String, i64)> = counts.into_iter().collect();
            values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            values.truncate(MAX_FACET_VALUES);
            json!({
                "field": field.name(),
                "values": values
                    .into_iter()
                    .map(|(value, count)| json!({ "value": value, "count": count }))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    Value::Array(facets)
}
