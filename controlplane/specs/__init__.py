"""What users submit, parsed and checked once: a workload's spec (``workload``), whose field
kinds a function's spec (``controlplane.serverless.spec``) shares. Below ``hub`` and
``serverless``, which both import it."""
