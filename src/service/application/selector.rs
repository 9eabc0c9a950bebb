//! The `selector` of application and ApplicationSet `List` and `Watch` requests: a Kubernetes
//! label selector ([`crate::labels`], as upstream parses it with apimachinery's `labels.Parse`);
//! one that does not parse is the caller's mistake.

use std::collections::BTreeMap;

use crate::error::AppError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(crate::labels::Selector);

impl Selector {
    pub fn parse(text: &str) -> Result<Self, AppError> {
        crate::labels::Selector::parse(text)
            .map(Self)
            .map_err(|why| AppError::InvalidArgument(format!("invalid selector {text:?}: {why}")))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches(labels)
    }
}
