"""The CDK app: typed deployment config -> four stacks (network, cluster, platform, inference).

Layout: ``config`` (the deployment config and its validation), ``stacks/`` (deployable units that wire
constructs together), ``constructs/`` (one concern each), ``nag`` (cdk-nag), ``app_builder`` (config ->
app), ``synth_cli`` (``make synth``). Every version comes from :mod:`igw.addon.pins`.
"""
