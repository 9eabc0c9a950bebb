//! Objects' protobuf encodings for gRPC replies. Each write stores the encoding next to the
//! object, so memory holds one copy of every object (its JSON) and a gRPC List reads the
//! encodings from the store as it writes the reply; a change's watch event carries its own, and
//! a single object is encoded from its JSON.

use bytes::Bytes;

use super::doc::with_rv;
use super::record::proto_entry_offset;
use super::{DocRef, Registry, RegistryError};
use crate::store::StoreError;

impl Registry {
    /// The protobuf encoding of one document, made from its JSON: about as quick as a store
    /// read for one object, and it keeps single reads (a Get, a watch's initial objects) off the
    /// store's blocking threads.
    pub fn proto(&self, doc: &DocRef) -> Result<Bytes, RegistryError> {
        doc.encode_proto().map_err(|err| RegistryError::Invalid {
            key: doc.key.clone(),
            err,
        })
    }

    /// The protobuf encodings of `docs`, in order, read at one point of the store. An encoding
    /// that is not the one of the given state (the object changed since it was listed, or was
    /// stored in an older layout) is made from the document's JSON instead, so the bytes always
    /// match the document, and its `proto_len`.
    pub async fn protos(&self, docs: &[DocRef]) -> Result<Vec<Bytes>, RegistryError> {
        // What Kubernetes holds has no stored encoding (and the store's numbers are not its
        // resourceVersions): each is made from its JSON.
        if self.kube.is_some() && docs.iter().all(|d| super::kube_view::KubeSide::holds(d.key.kind)) {
            return docs.iter().map(|doc| self.proto(doc)).collect();
        }
        let keys = docs.iter().map(|d| d.key.proto_store_key()).collect();
        let entries = self.store.get_many(keys).await?;
        docs.iter()
            .zip(entries)
            .map(|(doc, entry)| {
                // Written with the object's record, so at the same revision.
                let stored = entry
                    .filter(|entry| entry.mod_revision == doc.rv)
                    .and_then(|entry| {
                        let offset = proto_entry_offset(doc.key.kind, &entry.value)?;
                        Some(with_rv(doc.key.kind, &entry.value[offset..], doc.rv))
                    });
                let proto = match stored {
                    Some(proto) => proto,
                    None => self.proto(doc)?,
                };
                if proto.len() != doc.proto_len {
                    return Err(StoreError::Corrupt(format!(
                        "{}: the stored encoding is {} bytes, not {}",
                        doc.key,
                        proto.len(),
                        doc.proto_len
                    ))
                    .into());
                }
                Ok(proto)
            })
            .collect()
    }
}
