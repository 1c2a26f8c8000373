"""Code that runs on the ACCESS POINT, next to the local schedd: selection and preflight,
the path map, the bundle, export, import and output placement, and the agent's build."""
