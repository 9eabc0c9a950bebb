//! What a `List` or `Watch` of applications selects ([`Filter`]: upstream's `projects`, `repo`,
//! `selector`, `name` and `appNamespace`, and tiphys's `filter` and `search`) and, for a page,
//! how it is cut ([`PageParams`]: `limit`, `continue`, `sort`, `facets`). A part the server does
//! not know is refused by name: a misspelt filter that matched everything would mislead.

use super::AppQuery;
use super::selector::Selector;
use crate::catalog::{Field, Sort, cursor};
use crate::error::AppError;
use crate::registry::DocRef;
use crate::state::ServerState;

/// The bit of [`Filter::failures`] for what facets never leave out (namespaces served, name,
/// selector, search).
const BASE: u8 = 1 << 7;
/// A limit above which a page is no page: the list's bound on items per reply.
pub const MAX_LIMIT: i64 = 100_000;

/// Does a query select this application?
pub(super) struct Filter {
    /// The control namespace and the enabled ones: what is never shown outside them.
    control: String,
    enabled: crate::kubernetes::AppNamespaces,
    /// Each entry: the application has one of the values of the field. Entries of the same
    /// field from different parameters (`projects` and `filter=project=…`) all apply.
    fields: Vec<(Field, Vec<String>)>,
    selector: Selector,
    name: String,
    namespace: Option<String>,
    /// Lower case; the name holds it. Application names are DNS-1123 subdomains (lower case,
    /// checked on every write, and by Kubernetes for custom resources), so the name is compared
    /// as it is, without a lower-case copy per application.
    search: String,
}

impl Filter {
    pub(super) fn new(state: &ServerState, q: &AppQuery) -> Result<Self, AppError> {
        let mut fields = Vec::new();
        let projects: Vec<String> = q.projects.iter().chain(&q.project).cloned().collect();
        if !projects.is_empty() {
            fields.push((Field::Project, projects));
        }
        if !q.repo.is_empty() {
            fields.push((Field::Repo, vec![Field::Repo.normal_value(&q.repo)]));
        }
        fields.extend(parse_filters(&q.filter)?);
        Ok(Self {
            control: state.namespace.clone(),
            enabled: state.app_namespaces.clone(),
            fields,
            selector: Selector::parse(&q.selector)?,
            name: q.name.clone(),
            namespace: (!q.app_namespace.is_empty()).then(|| q.app_namespace.clone()),
            search: q.search.trim().to_ascii_lowercase(),
        })
    }

    pub(super) fn matches(&self, doc: &DocRef) -> bool {
        self.failures(doc) == 0
    }

    /// The fields whose filter `doc` fails, as [`Field::bit`]s, with [`BASE`] when it fails
    /// anything else: a facet of field F counts the applications failing at most F.
    pub(super) fn failures(&self, doc: &DocRef) -> u8 {
        let s = &doc.summary;
        let base = self.enabled.enabled(&doc.key.namespace, &self.control)
            && (self.name.is_empty() || doc.key.name == self.name)
            && self.namespace.as_ref().is_none_or(|ns| &doc.key.namespace == ns)
            && (self.search.is_empty() || doc.key.name.contains(&self.search))
            && self.selector.matches(&s.labels);
        let mut failed = if base { 0 } else { BASE };
        for (field, values) in &self.fields {
            if !values.iter().any(|v| field.has(s, v)) {
                failed |= field.bit();
            }
        }
        failed
    }

    /// The field filters, for the indexes to pick candidates by.
    pub(super) fn fields(&self) -> &[(Field, Vec<String>)] {
        &self.fields
    }

    pub(super) fn search(&self) -> &str {
        &self.search
    }

    /// What this filter selects, for a continue token to be bound to.
    fn digest_parts(&self) -> Vec<(&'static str, String)> {
        let mut fields: Vec<String> = self
            .fields
            .iter()
            .map(|(f, values)| {
                let mut values = values.clone();
                values.sort();
                format!("{}={}", f.name(), values.join("\u{1}"))
            })
            .collect();
        fields.sort();
        vec![
            ("fields", fields.join("\u{2}")),
            ("selector", format!("{:?}", self.selector)),
            ("name", self.name.clone()),
            ("namespace", self.namespace.clone().unwrap_or_default()),
            ("search", self.search.clone()),
        ]
    }
}

/// `filter` entries (`field=value`), the values of one field gathered (any of them matches).
fn parse_filters(entries: &[String]) -> Result<Vec<(Field, Vec<String>)>, AppError> {
    let mut out: Vec<(Field, Vec<String>)> = Vec::new();
    for entry in entries.iter().filter(|e| !e.trim().is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(AppError::InvalidArgument(format!(
                "filter {entry:?} is not of the form field=value"
            )));
        };
        let field = Field::parse(name.trim()).ok_or_else(|| unknown("filter field", name.trim()))?;
        let value = field.normal_value(value.trim());
        match out.iter_mut().find(|(f, _)| *f == field) {
            Some((_, values)) => values.push(value),
            None => out.push((field, vec![value])),
        }
    }
    Ok(out)
}

fn unknown(what: &str, name: &str) -> AppError {
    let known: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
    AppError::InvalidArgument(format!("unknown {what} {name:?} (known: {})", known.join(", ")))
}

/// How a page of the list is cut.
pub(super) struct PageParams {
    /// 0: no limit.
    pub limit: usize,
    pub sort: Sort,
    pub descending: bool,
    pub continue_token: String,
    pub facets: Vec<Field>,
}

impl PageParams {
    /// The page `q` asks for; `None` when it uses none of the page parameters (upstream's list).
    pub(super) fn parse(q: &AppQuery) -> Result<Option<Self>, AppError> {
        let asked = q.limit != 0
            || !q.continue_token.is_empty()
            || !q.sort.is_empty()
            || !q.filter.is_empty()
            || !q.search.is_empty()
            || !q.facets.is_empty();
        if !asked {
            return Ok(None);
        }
        if !(0..=MAX_LIMIT).contains(&q.limit) {
            return Err(AppError::InvalidArgument(format!(
                "limit {} is out of range: give 1 to {MAX_LIMIT}, or 0 for no limit",
                q.limit
            )));
        }
        let sort_text = q.sort.trim();
        let (descending, sort_name) = match sort_text.strip_prefix('-') {
            Some(name) => (true, name),
            None => (false, sort_text),
        };
        let sort = if sort_name.is_empty() {
            Sort::Name
        } else {
            Sort::parse(sort_name).ok_or_else(|| {
                let known: Vec<&str> = Sort::ALL.iter().map(|s| s.name()).collect();
                AppError::InvalidArgument(format!(
                    "unknown sort {sort_name:?} (known: {}; a leading - reverses)",
                    known.join(", ")
                ))
            })?
        };
        let mut facets = Vec::new();
        // `facets=project,health` and `facets=project&facets=health` alike.
        for name in q.facets.iter().flat_map(|f| f.split(',')).map(str::trim) {
            if name.is_empty() {
                continue;
            }
            let field = Field::parse(name).ok_or_else(|| unknown("facet field", name))?;
            if !facets.contains(&field) {
                facets.push(field);
            }
        }
        Ok(Some(Self {
            limit: usize::try_from(q.limit).unwrap_or(0),
            sort,
            descending,
            continue_token: q.continue_token.trim().to_owned(),
            facets,
        }))
    }

    /// What a continue token of this query is bound to: the filter and the sort.
    pub(super) fn digest(&self, filter: &Filter) -> String {
        let mut parts = filter.digest_parts();
        parts.push((
            "sort",
            format!("{}{}", if self.descending { "-" } else { "" }, self.sort.name()),
        ));
        cursor::digest(&parts)
    }
}
