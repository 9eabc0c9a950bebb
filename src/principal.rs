//! Who is calling. Worked out once per request (see `server::dispatch`) and
//! handed to every use case; use cases decide what the caller may see.

/// The caller of one request.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Principal {
    /// No credentials were presented.
    #[default]
    Anonymous,
}

impl Principal {
    /// Whether the caller presented valid credentials.
    pub fn is_authenticated(&self) -> bool {
        !matches!(self, Self::Anonymous)
    }
}
