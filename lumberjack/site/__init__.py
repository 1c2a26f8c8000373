"""Code that runs AT THE SITE (login node, compute nodes): the agent, the remote pool's
configs, the batch systems and pilot scripts. Standard library only (spython, vendored,
drives Apptainer); shipped as agent.pyz, never imported by the access point's steps."""
