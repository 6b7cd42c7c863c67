//! What every adapter shares: the constructors from the environment, the configuration
//! accessor, `Debug` without the key, and the `Provider` implementation that hands a request to
//! the transport together with the adapter's wire description, and scrubs the key from the
//! answer on its way back.
//!
//! Written once as a macro because the four adapters are distinct public types (with their own
//! options, such as the output-limit field of Chat Completions) around the same two fields, a
//! `transport` and a `wire`.

/// Implements the shared parts of an adapter type that has `transport: Transport` and
/// `wire: <its Wire>` fields and an inherent `new(Config) -> Result<Self, Error>`, for the
/// variant `$protocol` of [`Protocol`](crate::Protocol), which gives its name and environment.
///
/// The adapter's own `native_compaction` method answers `compact_natively`; with
/// `native: "WHAT"` there is none, and the answer is that WHAT has no native compaction.
macro_rules! adapter_common {
    ($ty:ident, $protocol:ident, native: $what:literal) => {
        impl $ty {
            /// There is no native compaction: panto writes its own summary.
            fn native_compaction(
                &self,
                _request: &Request,
                _instructions: Option<&str>,
                _events: EventSink<'_>,
            ) -> std::future::Ready<Result<panto_provider::NativeCompaction, ProviderError>> {
                std::future::ready(Err(ProviderError::Unsupported {
                    message: concat!($what, " has no native compaction").into(),
                }))
            }
        }

        adapter_common!($ty, $protocol);
    };
    ($ty:ident, $protocol:ident) => {
        impl $ty {
            #[doc = concat!(
                "An adapter configured from the environment: the key and base URL variables of ",
                "[`Protocol::", stringify!($protocol), "`](crate::Protocol::", stringify!($protocol),
                ") ([`Protocol::environment`](crate::Protocol::environment)). The key may be ",
                "missing only when the base URL is not the official API (a keyless local server)."
            )]
            ///
            /// # Errors
            /// [`Error::MissingKey`] naming the variable, or [`Error::InvalidBaseUrl`].
            pub fn from_env() -> Result<$ty, Error> {
                $ty::new(Self::config_from_env(|k| std::env::var(k).ok())?)
            }

            #[doc = concat!("The configuration [`", stringify!($ty), "::from_env`] would use, read through `lookup`.")]
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($ty), "::from_env`].")]
            pub fn config_from_env(
                lookup: impl Fn(&str) -> Option<String>,
            ) -> Result<Config, Error> {
                crate::Protocol::$protocol.config_from_env(lookup)
            }

            /// The configuration in use.
            pub fn config(&self) -> &Config {
                self.transport.config()
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("transport", &self.transport)
                    .field("wire", &self.wire)
                    .finish()
            }
        }

        #[panto_provider::async_trait]
        impl Provider for $ty {
            fn name(&self) -> &str {
                crate::Protocol::$protocol.name()
            }

            async fn complete(
                &self,
                request: &Request,
                events: EventSink<'_>,
            ) -> Result<Message, ProviderError> {
                // The key and the sensitive header values are scrubbed from the answer,
                // streamed and whole, before it leaves the adapter: a server that echoes them
                // cannot get them shown or stored.
                let key = &self.transport.config().api_key;
                let secrets = std::iter::once(key).chain(self.transport.secrets());
                let mut guard = crate::secret::StreamGuard::new(secrets, events);
                let result = {
                    let mut sink = |event: panto_provider::StreamEvent<'_>| guard.event(event);
                    self.transport
                        .complete(&self.wire, self.name(), request, &mut sink)
                        .await
                };
                guard.finish();
                result.map(|mut message| {
                    key.scrub_message(&mut message);
                    for secret in self.transport.secrets() {
                        secret.scrub_message(&mut message);
                    }
                    message
                })
            }

            async fn compact_natively(
                &self,
                request: &Request,
                instructions: Option<&str>,
                events: EventSink<'_>,
            ) -> Result<panto_provider::NativeCompaction, ProviderError> {
                // The payload goes back to the provider byte for byte, so it is not scrubbed;
                // errors are, by the transport.
                self.native_compaction(request, instructions, events).await
            }
        }
    };
}

pub(crate) use adapter_common;
