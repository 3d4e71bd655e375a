"""The REST API: one router per resource (meta, jobs, cluster, tenants, design and experiments), the request
and response models the OpenAPI schema documents, and the ASGI guard in front of them."""
