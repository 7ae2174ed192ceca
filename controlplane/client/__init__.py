"""The ``controlplane`` client commands' library: the config file (``config``), the HTTP calls
(``http``), API documents from files (``documents``), tables and describe pages (``render``,
``tables``, ``describe``) and the verbs themselves (``verbs``)."""
