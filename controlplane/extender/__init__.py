"""A Kubernetes scheduler extender: kube-scheduler asks edgeplane's profile to filter and score.

``kube.py`` holds the ``k8s.io/kube-scheduler/extender/v1`` wire types, ``quantity.py`` parses
Kubernetes resource quantities, ``translate.py`` turns a Pod into a ``WorkloadRequest``,
``decide.py`` answers filter and prioritize from the scheduler, ``settings.py`` parses the
listener's options and ``app.py`` serves the routes. See ``docs/kubernetes.md``.
"""
