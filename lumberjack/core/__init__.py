"""Pure formats used on both sides of the SSH link: the job_queue.log, the ClassAd text
codec, and the facts both sides must agree on. Standard library only; shipped to the site
inside agent.pyz."""
