from django.contrib import admin

from portal.auth_forms import AdminSignInForm

admin.site.login_form = AdminSignInForm  # throttled like the portal's own login page
