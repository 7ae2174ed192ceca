"""The web console's static files (index.html, console.js, console.css), served by
``controlplane/api/console.py``. No build step: what is here is what the browser gets."""
